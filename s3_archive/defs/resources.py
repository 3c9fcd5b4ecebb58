"""The resources every definition shares (`kafka`, `s3`, `spark`, `schema_registry`), built here and only here from
the environment.

One connection model: every setting is its own variable (`KAFKA_ENV` in io/kafka.py, `S3_ENV` in io/s3_resource.py,
`REGISTRY_ENV` in io/schema_registry.py, `SPARK_ENV` here; docs/configuration.md, "Environment"), so Kafka's
security, the S3 endpoint and credentials, the Schema Registry and the Spark master combine freely. Definitions
loading, the sensors, `s3-archive refresh-topics`, the runs (Spark's Kafka source and s3a, the restore's producer and
ledger, the checks, the catalog's Glue client, registry decoding) all get them from here.

Values are bound with `dg.EnvVar`: resolved when a run or a sensor tick starts, never at import, and shown in the UI
as the variable's name (secrets never appear in run config or metadata). A variable unset (or empty) when definitions
load leaves its setting at the default. The two on/off settings and the Kafka request timeout are read when
definitions load.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping

import dagster as dg

from s3_archive.defs.webserver import WEBSERVER_ENV, WebserverResource
from s3_archive.io.kafka import KAFKA_ENV, KafkaResource
from s3_archive.io.s3_resource import S3_ENV, S3Resource
from s3_archive.io.schema_registry import REGISTRY_ENV, SchemaRegistryResource
from s3_archive.io.spark import SparkResource
from s3_archive.model.errors import InvalidConfig

SPARK_ENV = {"master": "S3_ARCHIVE_SPARK_MASTER", "remote": "S3_ARCHIVE_SPARK_REMOTE",
             "worker_jars_dir": "S3_ARCHIVE_SPARK_WORKER_JARS_DIR"}
# The region: ours, else the AWS SDKs' own variables (which boto3's and Java's default chains read too).
REGION_VARS = (S3_ENV["region_name"], "AWS_REGION", "AWS_DEFAULT_REGION")
RETIRED_ENV = "S3_ARCHIVE_ENV"
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _is_set(var: str) -> bool:
    return bool(os.environ.get(var))


def _bound(env: Mapping[str, str], fields: tuple[str, ...]) -> dict[str, dg.EnvVar]:
    """`field: dg.EnvVar(var)` for each of `fields` whose variable is set."""
    return {f: dg.EnvVar(env[f]) for f in fields if _is_set(env[f])}


def flag(var: str, default: bool) -> bool:
    """An on/off variable (true/false, 1/0, yes/no, on/off); unset or empty: `default`."""
    value = os.environ.get(var, "").strip().lower()
    if not value:
        return default
    if value not in _TRUE + _FALSE:
        raise InvalidConfig(f"${var} is {os.environ[var]!r}; allowed: true or false")
    return value in _TRUE


def seconds(var: str) -> float | None:
    """A variable holding a number of seconds > 0; unset or empty: None (the setting's default)."""
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    try:
        parsed = float(value)
    except ValueError:
        parsed = math.nan
    if not (math.isfinite(parsed) and parsed > 0):
        raise InvalidConfig(f"${var} is {os.environ[var]!r}; it must be a number of seconds > 0")
    return parsed


def retired_env_warning() -> None:
    if RETIRED_ENV in os.environ:
        warnings.warn(f"${RETIRED_ENV} is no longer read: each Kafka, S3 and Spark setting is its own variable "
                      "(docs/configuration.md, 'Environment'); unset it", stacklevel=2)


def kafka_resource() -> KafkaResource:
    """The Kafka connection of the runs, sensors, checks and `s3-archive refresh-topics` alike."""
    optional = tuple(f for f in KAFKA_ENV if f not in ("bootstrap_servers", "ssl_verify_hostname", "timeout_s"))
    timeout = seconds(KAFKA_ENV["timeout_s"])
    return KafkaResource(bootstrap_servers=dg.EnvVar(KAFKA_ENV["bootstrap_servers"]),
                         ssl_verify_hostname=flag(KAFKA_ENV["ssl_verify_hostname"], True),
                         **({} if timeout is None else {"timeout_s": timeout}), **_bound(KAFKA_ENV, optional))


def _region() -> dict[str, dg.EnvVar]:
    var = next((v for v in REGION_VARS if _is_set(v)), None)
    return {"region_name": dg.EnvVar(var)} if var else {}


def _attempts(name: str) -> dict[str, dg.EnvVar]:
    var = S3_ENV["max_attempts"]
    return {name: dg.EnvVar.int(var)} if _is_set(var) else {}


def s3_resource() -> S3Resource:
    """The S3 (and Glue) connection. Path style defaults to on with an endpoint (S3-compatible servers)."""
    fields = ("endpoint_url", "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "ca_bundle",
              "sse_kms_key_id", "storage_class")
    glue = S3_ENV["glue_endpoint_url"]
    return S3Resource(path_style=flag(S3_ENV["path_style"], _is_set(S3_ENV["endpoint_url"])),
                      **_bound(S3_ENV, fields + ("retry_mode",)), **_attempts("max_attempts"), **_region(),
                      # Set but empty means AWS's own Glue endpoint (with an S3-compatible server for S3).
                      **({"glue_endpoint_url": dg.EnvVar(glue)} if glue in os.environ else {}))


def spark_resource() -> SparkResource:
    """Spark (local, `spark://…` or Spark Connect `sc://…`) with the S3 connection of `s3_resource` for s3a."""
    if _is_set(SPARK_ENV["master"]) and _is_set(SPARK_ENV["remote"]):
        raise InvalidConfig(f"set one of ${SPARK_ENV['master']} (local[*], spark://…) and ${SPARK_ENV['remote']} "
                            "(Spark Connect, sc://…), not both")
    s3 = s3_resource()
    region = _region()
    return SparkResource(
        **_bound(SPARK_ENV, tuple(SPARK_ENV)),
        **({"s3_region": region["region_name"]} if region else {}),
        s3_path_style=s3.path_style, **_attempts("s3_max_attempts"),
        **{f"s3_{name}": dg.EnvVar(S3_ENV[field]) for field, name in (
            ("endpoint_url", "endpoint_url"), ("aws_access_key_id", "access_key_id"),
            ("aws_secret_access_key", "secret_access_key"), ("aws_session_token", "session_token"),
            ("ca_bundle", "ca_bundle"), ("sse_kms_key_id", "sse_kms_key_id"), ("storage_class", "storage_class"))
           if _is_set(S3_ENV[field])},
    )


def schema_registry_resource() -> SchemaRegistryResource:
    """The Schema Registry of registry decoding (and of restores that re-register schemas); no URL: none."""
    timeout = REGISTRY_ENV["timeout_s"]
    return SchemaRegistryResource(**_bound(REGISTRY_ENV, ("url", "username", "password", "ca_location")),
                                  **({"timeout_s": dg.EnvVar.int(timeout)} if _is_set(timeout) else {}))


def webserver_resource() -> WebserverResource:
    """The Dagster webserver the topic discovery sensor reloads the code location through (defs/webserver.py)."""
    return WebserverResource(**({"url": dg.EnvVar(WEBSERVER_ENV)} if _is_set(WEBSERVER_ENV) else {}))


def build_resources() -> dict[str, dg.ConfigurableResource]:
    retired_env_warning()
    return {"kafka": kafka_resource(), "s3": s3_resource(), "spark": spark_resource(),
            "schema_registry": schema_registry_resource(), "webserver": webserver_resource()}
