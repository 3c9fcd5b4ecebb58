"""SchemaRegistryResource: the Schema Registry of the archives that decode registry payloads (and of the restores
that re-register their schemas), in the one connection model: each setting its own environment variable
(`REGISTRY_ENV`, bound in defs/resources.py). The password is never logged and no error carries it.
"""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field

from s3_archive.io.registry_client import RegistryConnection
from s3_archive.model.errors import InvalidConfig

# Each SchemaRegistryResource setting and the environment variable it is read from (docs/configuration.md).
REGISTRY_ENV = {
    "url": "S3_ARCHIVE_SCHEMA_REGISTRY_URL",
    "username": "S3_ARCHIVE_SCHEMA_REGISTRY_USERNAME",
    "password": "S3_ARCHIVE_SCHEMA_REGISTRY_PASSWORD",
    "ca_location": "S3_ARCHIVE_SCHEMA_REGISTRY_CA_LOCATION",
    "timeout_s": "S3_ARCHIVE_SCHEMA_REGISTRY_TIMEOUT_S",
}


def _env(field: str) -> str:
    return f"${REGISTRY_ENV[field]}"


class SchemaRegistryResource(dg.ConfigurableResource):
    """A Schema Registry with Confluent's REST API (Confluent Schema Registry, Apicurio's `/apis/ccompat/v7`,
    Karapace): its URL, HTTP basic auth, and the CA of its TLS certificate."""

    url: str | None = Field(default=None, description="e.g. https://registry:8081; None: no registry")
    username: str | None = Field(default=None, description="HTTP basic auth user")
    password: str | None = Field(default=None, description="HTTP basic auth password; bind with dg.EnvVar")
    ca_location: str | None = Field(default=None, description="CA certificate(s), PEM; None: the system's CAs")
    timeout_s: int = Field(default=10, description="each request's timeout in seconds (> 0); reads are retried")

    def connection(self) -> RegistryConnection | None:
        """The connection the driver, the write tasks and the restore use; None when no URL is set. InvalidConfig
        naming the variable when the settings cannot work."""
        if not self.url:
            if self.username or self.password:
                raise InvalidConfig(f"{_env('username')} / {_env('password')} set without {_env('url')}")
            return None
        if not self.url.startswith(("http://", "https://")):
            raise InvalidConfig(f"{_env('url')} is {self.url!r}; it must start with http:// or https://")
        if bool(self.username) != bool(self.password):
            raise InvalidConfig(f"HTTP basic auth needs both {_env('username')} and {_env('password')}")
        if self.timeout_s <= 0:
            raise InvalidConfig(f"{_env('timeout_s')} is {self.timeout_s}; it must be a number of seconds > 0")
        if self.ca_location and not os.path.isfile(self.ca_location):
            raise InvalidConfig(f"{_env('ca_location')} is {self.ca_location!r}, which is not a readable file")
        return RegistryConnection(self.url.rstrip("/"), self.username or None, self.password or None,
                                  self.ca_location or None, self.timeout_s)
