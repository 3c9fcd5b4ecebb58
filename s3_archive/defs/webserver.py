"""The Dagster webserver, as the topic discovery sensor reaches it to reload the code location when `topic_pattern`
matches a new topic: through Dagster's public GraphQL client (dagster-graphql), the same mutation as the UI's
*Deployment → Reload*. Its URL is `$S3_ARCHIVE_DAGSTER_URL` (docs/deployment.md); unset, nothing is reloaded and
the sensor says that a person must.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import dagster as dg
from pydantic import Field

WEBSERVER_ENV = "S3_ARCHIVE_DAGSTER_URL"
RELOAD_TIMEOUT_S = 120  # a code location with a thousand topics loads in well under that


@dataclass(frozen=True)
class Reloaded:
    ok: bool
    message: str


class WebserverResource(dg.ConfigurableResource):
    """Where the Dagster webserver answers GraphQL, e.g. http://dagster-webserver:3000 (a path prefix too)."""

    url: str | None = Field(default=None, description=f"the webserver's URL (${WEBSERVER_ENV}); None: no reloads")

    def reload(self, location: str) -> Reloaded:
        """Reload the code location, as the UI's Reload does; what happened (never raises: the sensor reports it)."""
        if not self.url:
            return Reloaded(False, f"${WEBSERVER_ENV} is not set")
        from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError, ReloadRepositoryLocationStatus

        parts = urlsplit(self.url)
        # Named in messages without any user info a URL may carry (this client sends none).
        where = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return Reloaded(False, f"${WEBSERVER_ENV} is not a webserver URL; expected http(s)://host[:port][/prefix]")
        try:
            client = DagsterGraphQLClient(parts.hostname, port_number=parts.port, use_https=parts.scheme == "https",
                                          path_prefix=parts.path.rstrip("/"), timeout=RELOAD_TIMEOUT_S)
            info = client.reload_repository_location(location)
        except DagsterGraphQLClientError as e:
            # The client's own message repeats the whole query; its cause says what happened.
            reason = str(e.__cause__ or e).strip().splitlines()[0]
            return Reloaded(False, f"the webserver at {where} did not reload code location {location!r}: {reason}")
        except OSError as e:
            return Reloaded(False, f"cannot reach the webserver at {where}: {e}")
        if info.status != ReloadRepositoryLocationStatus.SUCCESS:
            return Reloaded(False, f"the webserver at {where} could not reload code location {location!r}: "
                                   f"{info.failure_type}: {info.message}")
        return Reloaded(True, f"code location {location!r} reloaded through {where}")
