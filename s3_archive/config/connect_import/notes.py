"""The one place for what an import says about the connector's options: the comments written next to the YAML
keys (options that map approximately or to nothing), the environment variables that take over connections and
secrets, and the one error for what cannot be honoured.

A secret's value (an option named like a password, secret, token or JAAS config) is never read into a note, an
error or the YAML: only the option's name is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from s3_archive.model.errors import UnsupportedConnectConfig

_SECRET = re.compile(r"secret|password|passwd|jaas|token|private|api[._]?key|credentials?\.json", re.IGNORECASE)

# Options that configure Kafka Connect itself (workers, converters, error handling), not what is archived.
_CONNECT_FRAMEWORK = {
    "name": "the connector's name: the archive's name here",
    "connector.class": "which sink wrote the config",
    "tasks.max": "maps to nothing: Spark reads a run's windows in parallel (S3_ARCHIVE_SPARK_MASTER sets the "
                 "cores)",
    "key.converter": "maps to nothing: the archive stores the key's bytes as they are in Kafka (no converter)",
    "value.converter": "maps to nothing: the archive stores the value's bytes as they are in Kafka (no converter); "
                       "value_decoding (docs/formats.md) can turn JSON values into columns",
    "storage.class": "maps to nothing: S3 is the only storage",
    "schema.compatibility": "maps to nothing: no schemas; the archive stores bytes",
    "schema.generator.class": "maps to nothing: no schemas",
    "s3.part.size": "maps to nothing: objects over 256 MiB are uploaded in parts of the SDK's size",
    "aws.s3.part.size.bytes": "maps to nothing: objects over 256 MiB are uploaded in parts of the SDK's size",
    "locale": "maps to nothing: time paths use numbers only",
    "s3.credentials.provider.class": "maps to nothing: without static keys the runs use AWS's default credential "
                                     "chain (env, profile, IRSA, instance role)",
    "aws.credentials.provider": "maps to nothing: without static keys the runs use AWS's default credential chain",
    "connect.s3.aws.auth.mode": "maps to nothing: static keys come from the environment, else AWS's default chain",
}
_FRAMEWORK_PREFIXES = {
    "errors.": "maps to nothing: an undecodable value fails its window or goes to the dead-letter prefix "
               "(value_decoding.on_error)",
    "transforms": "maps to nothing: single message transforms do not run; records are archived as they are",
    "predicates": "maps to nothing: single message transforms do not run",
    "consumer.override.": "maps to nothing: the runs read Kafka with the S3_ARCHIVE_KAFKA_* settings",
    "key.converter.": "maps to nothing: no converter",
    "value.converter.": "maps to nothing: no converter",
    "header.converter": "maps to nothing: header values are stored as bytes",
    "s3.retry": "maps to nothing: boto3's and s3a's own retries",
    "s3.part.retries": "maps to nothing: boto3's and s3a's own retries",
    "aws.s3.backoff": "maps to nothing: boto3's and s3a's own retries",
    "connect.s3.http.": "maps to nothing: boto3's and s3a's own retries",
    "connect.s3.max.retries": "maps to nothing: a failed window is re-run (exactly once)",
    "connect.s3.retry.interval": "maps to nothing: a failed window is re-run (exactly once)",
    "connect.s3.error.policy": "maps to nothing: a failed window fails its run and is re-run (exactly once)",
    "connect.s3.exactly.once": "maps to nothing: every window is written exactly once (docs/commit-protocol.md)",
    "connect.s3.indexes": "maps to nothing: the window manifests are the commit records (docs/commit-protocol.md)",
    "connect.s3.seek": "maps to nothing: the window manifests are the commit records",
    "connect.s3.local.tmp": "maps to nothing: executors write each object straight to its final key",
    "connect.s3.pool": "maps to nothing",
    "connect.s3.schema": "maps to nothing: no schemas",
    "connect.s3.latest.schema": "maps to nothing: no schemas",
}

# Connection options: set in the runs' environment, never in the archive YAML (docs/configuration.md).
ENV = {
    "s3.region": "S3_ARCHIVE_S3_REGION", "aws.s3.region": "S3_ARCHIVE_S3_REGION",
    "aws_s3_region": "S3_ARCHIVE_S3_REGION", "connect.s3.aws.region": "S3_ARCHIVE_S3_REGION",
    "store.url": "S3_ARCHIVE_S3_ENDPOINT_URL", "aws.s3.endpoint": "S3_ARCHIVE_S3_ENDPOINT_URL",
    "aws_s3_endpoint": "S3_ARCHIVE_S3_ENDPOINT_URL", "connect.s3.custom.endpoint": "S3_ARCHIVE_S3_ENDPOINT_URL",
    "s3.path.style.access.enabled": "S3_ARCHIVE_S3_PATH_STYLE",
    "connect.s3.path.style.access": "S3_ARCHIVE_S3_PATH_STYLE",
    "aws.access.key.id": "S3_ARCHIVE_S3_ACCESS_KEY_ID", "aws_access_key_id": "S3_ARCHIVE_S3_ACCESS_KEY_ID",
    "connect.s3.aws.access.key": "S3_ARCHIVE_S3_ACCESS_KEY_ID",
    "aws.secret.access.key": "S3_ARCHIVE_S3_SECRET_ACCESS_KEY",
    "aws_secret_access_key": "S3_ARCHIVE_S3_SECRET_ACCESS_KEY",
    "connect.s3.aws.secret.key": "S3_ARCHIVE_S3_SECRET_ACCESS_KEY",
    "aws.session.token": "S3_ARCHIVE_S3_SESSION_TOKEN",
    "s3.sse.kms.key.id": "S3_ARCHIVE_S3_SSE_KMS_KEY_ID", "aws.s3.sse.key.id": "S3_ARCHIVE_S3_SSE_KMS_KEY_ID",
    "s3.storage.class": "S3_ARCHIVE_S3_STORAGE_CLASS", "aws.s3.storage.class": "S3_ARCHIVE_S3_STORAGE_CLASS",
    "consumer.override.sasl.jaas.config": "S3_ARCHIVE_KAFKA_SASL_USERNAME and S3_ARCHIVE_KAFKA_SASL_PASSWORD",
    "consumer.override.sasl.mechanism": "S3_ARCHIVE_KAFKA_SASL_MECHANISM",
    "consumer.override.security.protocol": "S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL",
    "consumer.override.bootstrap.servers": "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS",
    "consumer.override.ssl.key.password": "S3_ARCHIVE_KAFKA_SSL_KEY_PASSWORD",
}


def is_secret(option: str) -> bool:
    return bool(_SECRET.search(option)) and not option.endswith(".provider.class")


def refuse(option: str, value: object, allowed: str) -> UnsupportedConnectConfig:
    """The one error: the option, its value (unless it is a secret) and what is allowed."""
    shown = "(a secret, not shown)" if is_secret(option) else repr(value)
    return UnsupportedConnectConfig(f"cannot import {option}={shown}: {allowed}")


@dataclass
class Translation:
    """One archive of the imported config: its YAML keys, and the comments that go with them."""

    archive: dict[str, Any]
    notes: dict[str, list[str]] = field(default_factory=dict)  # YAML key -> comments above it
    unmapped: list[str] = field(default_factory=list)  # options that map to nothing
    env: dict[str, tuple[str, str]] = field(default_factory=dict)  # variable -> (value or placeholder, option)
    # The sink's own objects as a foreign source (docs/restore-foreign.md), less name and topic; or why they cannot
    # be read (`--take-over` needs them).
    sink: dict[str, Any] | str = "the sink's objects are not described"

    def note(self, key: str, option: str, value: object, text: str) -> None:
        shown = "(secret)" if is_secret(option) else value
        self.notes.setdefault(key, []).append(f"{option}={shown}: {text}" if option else text)

    def nothing(self, option: str, value: object, text: str) -> None:
        shown = "(secret)" if is_secret(option) else value
        self.unmapped.append(f"{option}={shown}: {text.removeprefix('maps to nothing: ')}")


class Props:
    """The connector's options as text; tracks which ones a translator used, so the rest can be commented."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = {str(k): _text(v) for k, v in data.items()}
        self.used: set[str] = set()

    def get(self, *names: str, default: str | None = None) -> str | None:
        """The first of `names` that is set (an option and its deprecated aliases)."""
        for n in names:
            if n in self.data:
                self.used.add(n)
                return self.data[n]
        return default

    def has(self, name: str) -> bool:
        return name in self.data

    def int(self, name: str, default: int | None = None, minimum: int = 0) -> int | None:
        v = self.get(name)
        if v is None:
            return default
        try:
            n = int(v.strip())
        except ValueError:
            raise refuse(name, v, f"an integer >= {minimum} is needed") from None
        if n < minimum:
            raise refuse(name, v, f"an integer >= {minimum} is needed")
        return n

    def bool(self, name: str, default: bool) -> bool:
        v = self.get(name)
        if v is None:
            return default
        if v.strip().lower() not in ("true", "false"):
            raise refuse(name, v, "true or false")
        return v.strip().lower() == "true"


def converter_encoding(props: Props, option: str) -> str:
    """How the sink's JSON holds a key or value its converter gave: base64 strings for the ByteArrayConverter,
    text otherwise. Read without marking the option used: it still maps to nothing in the archive."""
    conv = props.data.get(option, "org.apache.kafka.connect.converters.ByteArrayConverter")
    return "base64" if conv.endswith("ByteArrayConverter") else "none"


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def settle_rest(props: Props, t: Translation) -> None:
    """Comment every option no translator used: connections and secrets become environment variables, the rest
    maps to nothing (Kafka Connect's own options with a reason, unknown ones as ignored)."""
    for option in sorted(set(props.data) - props.used):
        value = props.data[option]
        if option in ENV:
            var = ENV[option]
            shown = "<the secret>" if is_secret(option) else value
            t.env.setdefault(var, (shown, option))
        elif is_secret(option):
            t.env.setdefault(f"(none: {option} is not used)", ("<not copied>", option))
        elif option in _CONNECT_FRAMEWORK:
            if option not in ("name", "connector.class"):
                t.nothing(option, value, _CONNECT_FRAMEWORK[option])
        elif (p := next((p for p in _FRAMEWORK_PREFIXES if option.startswith(p)), None)) is not None:
            t.nothing(option, value, _FRAMEWORK_PREFIXES[p])
        else:
            t.nothing(option, value, "not an option s3-archive knows of this sink; ignored")


_NAME_BAD = re.compile(r"[^a-z0-9_]+")


def archive_name(name: str | None, default: str = "imported") -> str:
    """A connector (or topic) name as an archive name: [a-z][a-z0-9_]{0,62}."""
    n = _NAME_BAD.sub("_", (name or default).lower()).strip("_") or default
    if not n[0].isalpha():
        n = "a_" + n
    return n[:63]


def topic_list(t: Translation, props: Props) -> None:
    """`topics` (comma list) and `topics.regex` (a Java regex: Python's `re` reads the common subset alike)."""
    topics = props.get("topics")
    regex = props.get("topics.regex")
    if topics:
        t.archive["topics"] = [s.strip() for s in topics.split(",") if s.strip()]
    if regex:
        t.archive["topic_pattern"] = regex
        t.note("topic_pattern", "topics.regex", regex, "a Java regex read by Python's re (full match); topics it "
               "matches are archived after `s3-archive refresh-topics` (docs/configuration.md)")
    if not topics and not regex:
        raise refuse("topics", None, "the sink config needs topics (a comma list) or topics.regex")
