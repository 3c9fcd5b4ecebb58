"""Text of a Kafka Connect S3 sink config → archive YAML with comments (`s3-archive import-connect FILE`).

The input is JSON (the bare config map, or the REST shape `{"name": …, "config": {…}}`), a Java properties file,
or bare KCQL (`INSERT INTO …`). The sink is told by `connector.class`, else by its options. The YAML is checked by
the config loader before it is returned, so what is printed loads.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

import yaml

from s3_archive.config.connect_import import aiven, confluent, kcql
from s3_archive.config.connect_import.converters import converters
from s3_archive.config.connect_import.notes import Props, Translation, archive_name, refuse
from s3_archive.config.settings import parse_settings
from s3_archive.model.errors import InvalidConfig, UnsupportedConnectConfig

SINKS = {"aiven": "Aiven S3 sink", "confluent": "Confluent S3 sink", "lenses": "Lenses S3 sink (KCQL)"}
_KEY_ORDER = ("name", "topics", "topic_pattern", "bucket", "prefix", "format", "compression", "compression_level",
              "csv_fields", "envelope", "value_decoding", "key_decoding", "sink_output", "flush", "schedule_cron",
              "start_position", "layout")
_LAYOUT_ORDER = ("template", "partition_by", "padding", "timezone", "extension")
WIDTH = 118


def parse_input(text: str) -> dict[str, Any]:
    """The connector's options from JSON, a properties file or bare KCQL."""
    stripped = text.strip()
    if not stripped:
        raise UnsupportedConnectConfig("the connector config is empty; give its JSON, properties or KCQL")
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise UnsupportedConnectConfig(f"the connector config is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise UnsupportedConnectConfig("the connector JSON must be an object of options")
        if isinstance(data.get("config"), dict):  # REST shape {"name": ..., "config": {...}}
            return {**({"name": data["name"]} if "name" in data else {}), **data["config"]}
        return data
    if re.match(r"(?i)insert\s+into\s", stripped):
        return {"connect.s3.kcql": stripped}
    return _properties(stripped)


def _properties(text: str) -> dict[str, str]:
    """Java properties: `key=value` or `key: value` lines, `#`/`!` comments, `\\` continuation lines."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        while line.endswith("\\") and not line.endswith("\\\\"):
            line = line[:-1] + next(lines, "").strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if m is None:
            raise UnsupportedConnectConfig(f"not a properties line (key=value): {line[:80]!r}")
        out[m[1]] = m[2]
    return out


def sink_of(options: dict[str, Any]) -> str:
    cls = str(options.get("connector.class", ""))
    low = cls.lower()
    if "source" in low.rsplit(".", 1)[-1]:
        raise refuse("connector.class", cls, "a sink connector's config (this is a source connector: it reads S3 "
                     "into Kafka; restore does that here, docs/restore-foreign.md)")
    if "aiven" in low:
        return "aiven"
    if low.startswith("io.confluent.connect.s3"):
        return "confluent"
    if "lenses" in low or "streamreactor" in low or "datamountaineer" in low:
        return "lenses"
    if not cls:
        if "connect.s3.kcql" in options:
            return "lenses"
        if {"aws.s3.bucket.name", "aws_s3_bucket"} & set(options):
            return "aiven"
        if "s3.bucket.name" in options:
            return "confluent"
    raise refuse("connector.class", cls or None, "an S3 sink of Aiven (io.aiven.kafka.connect.s3."
                 "AivenKafkaConnectS3SinkConnector), Confluent (io.confluent.connect.s3.S3SinkConnector) or Lenses "
                 "(io.lenses.streamreactor.connect.aws.s3.sink.S3SinkConnector, connect.s3.kcql)")


def translate(options: dict[str, Any], name: str | None = None) -> tuple[str, list[Translation]]:
    sink = sink_of(options)
    props = Props(options)
    props.get("connector.class")
    decodings = converters(props)  # before the sink's own options: the rest of the options are commented there
    translations = {"aiven": aiven.translate, "confluent": confluent.translate, "lenses": kcql.translate}[sink](props)
    for t in translations:
        decodings.apply(t)
    if name is not None:
        for i, t in enumerate(translations):
            t.archive["name"] = name if len(translations) == 1 else f"{name}_{i + 1}"
    return sink, translations


def take_over(options: dict[str, Any], translations: list[Translation]) -> list[dict[str, Any]]:
    """`--take-over`: each archive starts where the connector's consumer group stopped, and the connector's objects
    of each topic become a foreign source that precedes the archive (docs/import-connect.md, "Taking over")."""
    group = options.get("consumer.override.group.id")
    if group is None:
        if not options.get("name"):
            raise refuse("name", None, "--take-over needs the connector's name: its consumer group is "
                         "connect-<name> (or give consumer.override.group.id)")
        group = f"connect-{options['name']}"
    sources = []
    for t in translations:
        if isinstance(t.sink, str):
            raise refuse("--take-over", t.archive["name"], f"the connector's objects cannot be read back: {t.sink}")
        if "topics" not in t.archive:
            raise refuse("topics.regex", options.get("topics.regex"), "--take-over needs the topics listed "
                         "(topics): each topic's objects become a foreign source of its own")
        t.archive["start_position"] = {"consumer_group": str(group)}
        t.note("start_position", "", "", f"take-over: the first windows start where the connector's consumer group "
               f"{group!r} stopped; stop the connector first (docs/import-connect.md, \"Taking over\")")
        for topic in t.archive["topics"]:
            sources.append({"name": archive_name(f"{t.archive['name']}_{topic}_sink"), **t.sink, "topic": topic,
                            "archive": t.archive["name"]})
    return sources


def import_connect(text: str, name: str | None = None, source: str = "the connector config",
                   take_over_group: bool = False) -> str:
    """The archive YAML for a sink config's text; UnsupportedConnectConfig names what cannot be honoured.
    `take_over_group`: `--take-over` (`take_over`)."""
    options = parse_input(text)
    sink, translations = translate(options, name)
    foreign = take_over(options, translations) if take_over_group else []
    out = render(sink, translations, source, options.get("name"), foreign)
    try:
        parse_settings(yaml.safe_load(out))
    except InvalidConfig as e:
        raise UnsupportedConnectConfig(f"the {SINKS[sink]} config cannot be honoured as an archive: {e}") from None
    return out


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}#   ", break_on_hyphens=False, break_long_words=False)


def _value_lines(key: str, value: Any, indent: str) -> list[str]:
    # Block style for the keys, flow style for leaf collections (`topics: [a, b]`).
    dumped = yaml.safe_dump(value, sort_keys=False, default_flow_style=None, width=WIDTH - len(indent) - 2,
                            allow_unicode=True).removesuffix("\n").removesuffix("\n...")
    if "\n" not in dumped:
        return [f"{indent}{key}: {dumped}"]
    return [f"{indent}{key}:"] + [f"{indent}  {line}" for line in dumped.split("\n")]


def render(sink: str, translations: list[Translation], source: str, connector: str | None,
           foreign: list[dict[str, Any]] | None = None) -> str:
    lines = [f"# Imported by `s3-archive import-connect` from {source}"
             + (f" (connector {connector!r}, {SINKS[sink]})." if connector else f" ({SINKS[sink]}).")]
    lines += _comment("Comments name each sink option that maps approximately or to nothing. Review them, then "
                      "add the archive(s) to $S3_ARCHIVE_CONFIG (docs/import-connect.md).", "")
    env: dict[str, tuple[str, str]] = {}
    for t in translations:
        for var, v in t.env.items():
            env.setdefault(var, v)
    if env:
        lines.append("# Connections and secrets are not part of this file; set them in the runs' environment "
                     "(docs/configuration.md):")
        for var, (value, option) in sorted(env.items()):
            if var.startswith("(none"):
                lines.append(f"#   {option}: not copied (a secret); s3-archive does not use it")
            elif value.startswith("<"):
                lines.append(f"#   {var}=...   ({option}: the secret is not copied here)")
            else:
                lines.append(f"#   {var}={value}   ({option})")
    lines.append("archives:")
    for t in translations:
        first = True
        keys = [k for k in _KEY_ORDER if k in t.archive] + [k for k in t.archive if k not in _KEY_ORDER]
        for k in keys:
            for text in t.notes.get(k, []):
                lines += _comment(text, "    " if not first else "  ")
            v = t.archive[k]
            if k == "layout":
                v = {n: v[n] for n in _LAYOUT_ORDER if n in v}
            value = _value_lines(k, v, "    ")
            if first:
                value[0] = "  - " + value[0][4:]
                first = False
            lines += value
        for k in sorted(set(t.notes) - set(keys)):
            lines += [c for text in t.notes[k] for c in _comment(text, "    ")]
        if t.unmapped:
            lines.append("    # Options that map to nothing:")
            lines += [c for text in t.unmapped for c in _comment(text, "    ")]
    if foreign:
        lines.append("foreign_sources:")
        lines += _comment("The connector's objects, read back by restore (docs/restore-foreign.md): each run of "
                          "kafka_restore_foreign/<name> restores them, then the archive's windows. value_encoding "
                          "and key_encoding (json objects) follow value.converter and key.converter: base64 for the "
                          "ByteArrayConverter, also when the config sets none (then the worker's default applies: "
                          "check it), none (text) for the others.", "  ")
        dumped = yaml.safe_dump(foreign, sort_keys=False, default_flow_style=None, width=WIDTH - 4,
                                allow_unicode=True)
        lines += ["  " + line for line in dumped.rstrip("\n").split("\n")]
    return "\n".join(lines) + "\n"
