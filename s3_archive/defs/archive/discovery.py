"""The topic discovery sensor `s3_archive_topic_discovery`: adds the topics each `topic_pattern` now matches on
Kafka to the topic state (io/topic_state.py), as `s3-archive refresh-topics` does, and reloads the code location when
the state knows topics the loaded definitions lack, so a new topic gets its asset, checks, sensor windows and runs
with no one pressing Reload.

Definitions never connect to Kafka when they load: they read that state. The reload is the UI's own (Dagster's
GraphQL client, defs/webserver.py), through the webserver at `$S3_ARCHIVE_DAGSTER_URL`; unset, or the webserver
unreachable, the tick says a person must reload, and the next tick tries again. A refresh only adds topics, so a
Kafka blip never removes topics, rules or code versions, and never reloads.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

from collections.abc import Mapping, Sequence

import dagster as dg

from s3_archive.config.settings import Settings, resolve_topic_patterns
from s3_archive.defs.webserver import WEBSERVER_ENV, WebserverResource
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.paths import topic_state_file
from s3_archive.io.topic_state import refresh_topics

DISCOVERY_SENSOR = "s3_archive_topic_discovery"
DEFAULT_LOCATION = "s3_archive"  # workspace.yaml's and pyproject.toml's name of the code location
RELOAD_HINT = "reload the code location (Deployment → Reload) to archive them"


def describe(added: Mapping[str, Sequence[str]]) -> str:
    return "; ".join(f"archive {name!r}: {', '.join(ts)}" for name, ts in sorted(added.items()))


def unloaded(settings: Settings, known: Mapping[str, Sequence[str]], loaded: Mapping[str, Sequence[str]],
             ) -> dict[str, list[str]]:
    """Per archive, the topics the state gives it that the loaded definitions lack (what a reload would add)."""
    now = resolve_topic_patterns(settings, known)
    return {a.name: missing for a in now.archives
            if (missing := sorted(set(a.topics) - set(loaded.get(a.name, ()))))}


def build_topic_discovery_sensor(settings: Settings, loaded: Mapping[str, Sequence[str]] | None = None,
                                 ) -> dg.SensorDefinition:
    """`loaded`: per archive name, its topics in the definitions being built (what the code location has)."""
    patterns = ", ".join(f"{a.name} ({a.topic_pattern!r})" for a in settings.archives if a.topic_pattern)
    loaded = dict(loaded or {})

    # Running by default: it reads topic metadata, writes the state file and reloads the code location; launches
    # no run itself (the offsets sensors of the reloaded code location cut the new topics' windows).
    @dg.sensor(
        name=DISCOVERY_SENSOR,
        minimum_interval_seconds=settings.topic_discovery.interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Adds the Kafka topics matching the topic_pattern of {patterns} to the topic state and reloads "
                    f"the code location (through ${WEBSERVER_ENV}) so that they get their assets. Launches no run.",
    )
    def _discovery(context: dg.SensorEvaluationContext, kafka: KafkaResource,
                   webserver: WebserverResource) -> dg.SkipReason:
        # KafkaUnavailable fails the tick and leaves the state as it was.
        result = refresh_topics(settings, kafka, topic_state_file())
        for name, gone in sorted(result.gone.items()):
            context.log.warning(f"archive {name!r}: known topics no longer in Kafka (kept; `s3-archive "
                                f"refresh-topics --forget TOPIC` removes one): {', '.join(gone)}")
        new = f"new topics: {describe(result.added)}" if result.added else \
            f"no new topics ({sum(map(len, result.known.values()))} known)"
        missing = unloaded(settings, result.known, loaded)
        if not missing:
            context.log.info(new)
            return dg.SkipReason(new)
        origin = context.code_location_origin
        location = origin.location_name if origin is not None else DEFAULT_LOCATION
        reloaded = webserver.reload(location)
        message = (f"{new}; {reloaded.message}, adding {describe(missing)}" if reloaded.ok
                   else f"{new}; not loaded yet: {describe(missing)}; {reloaded.message}, so {RELOAD_HINT} (the "
                        "next tick tries again)")
        (context.log.info if reloaded.ok else context.log.warning)(message)
        return dg.SkipReason(message)

    return _discovery
