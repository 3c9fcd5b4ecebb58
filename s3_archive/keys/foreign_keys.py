"""Object names of archives written by the Kafka Connect S3 sinks, parsed back to (partition, start offset).

- aiven: `file.name.template` (`{{topic}}-{{partition}}-{{start_offset}}` by default). Its templates are parsed,
  checked, rendered and parsed back by the one key engine (keys/template.py) in the `AIVEN` dialect; what is
  Aiven's is only that dialect and the value shapes around it:
  - placeholders `{{topic}}`, `{{partition}}`, `{{start_offset}}`, `{{timestamp:unit=yyyy|MM|dd|HH}}`, `{{key}}`
    (no `YYYY` alias), none required by the sink itself (the restore's needs are config/foreign.py's), each at
    most once; a placeholder takes at most one `name=value` parameter, as Aiven's template parser reads it;
  - numbers unpadded (as Java's Long.toString writes them: no leading zeros) unless `padding=true` (partition 10,
    start offset 20 digits);
  - `{{key}}` is whatever the key's string form is: any characters, possibly none;
  - literals are taken as they are (the sink writes them after `aws.s3.prefix`): only '{{' and '}}' are refused;
  - `{{timestamp:unit=…}}` is rendered from a datetime and parsed to {unit: int}.
  Ambiguous templates are refused with the reason, by the engine's one check.
- confluent: `<topics.dir>/<topic>/<encoded partition>/<topic>+<p>+<start offset>.<ext>`, the encoded partition
  `partition=<p>` (DefaultPartitioner) or any directories (TimeBasedPartitioner's `path.format`,
  FieldPartitioner's `<field>=<value>/…`), with `.keys.<ext>` / `.headers.<ext>` siblings (`store.kafka.keys`,
  `store.kafka.headers`) in a format of their own (`keys.format.class`, `headers.format.class`).
- lenses: `<prefix>/<topic>/<partition>/<offset>.<ext>` by default (newer sinks add `_<first ts>_<last ts>` after
  the offset), `<prefix>/<directories of PARTITIONBY>/<topic>(<partition>_<offset>).<ext>` with PARTITIONBY; the
  offset is the object's *last* record's, left-padded with `0` (padding.length.*), then `key.suffix`.

Every parser refuses a name that fits but carries a number no Kafka record can have (`NameOutOfRange`: a partition
beyond 2^31-1, an offset beyond 2^63-1), so every caller gets the same answer for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from s3_archive.keys.template import (
    Dialect,
    KeyTemplate,
    Padding,
    check_template,
    parse_key,
    parse_template,
    render_key,
)
from s3_archive.model.errors import InvalidForeignObject

DEFAULT_AIVEN_TEMPLATE = "{{topic}}-{{partition}}-{{start_offset}}"
KAFKA_MAX_PARTITION = 2**31 - 1  # partitions are Java ints
KAFKA_MAX_OFFSET = 2**63 - 1  # offsets are Java longs


class NameOutOfRange(InvalidForeignObject):
    """An object name that fits the sink's layout but holds a partition or offset beyond Kafka's ranges."""


def _in_kafka_range(partition: int | None, start_offset: int | None) -> None:
    if partition is not None and partition > KAFKA_MAX_PARTITION:
        raise NameOutOfRange(f"partition {partition} is beyond {KAFKA_MAX_PARTITION}, Kafka's largest partition")
    if start_offset is not None and start_offset > KAFKA_MAX_OFFSET:
        raise NameOutOfRange(f"start offset {start_offset} is beyond {KAFKA_MAX_OFFSET}, Kafka's largest offset")


AIVEN = Dialect(what="file.name.template", names=("topic", "partition", "start_offset", "timestamp", "key"),
                required=(), key_chars=None, repeats=False, param_lists=False, unit_aliases=(), paths=False,
                padding=Padding(type="none"))

_UNIT_OF = {"yyyy": lambda d: f"{d.year:04d}", "MM": lambda d: f"{d.month:02d}", "dd": lambda d: f"{d.day:02d}",
            "HH": lambda d: f"{d.hour:02d}"}


def aiven_template(text: str) -> KeyTemplate:
    """Parse and check a `file.name.template`; InvalidTemplate (naming the template and the reason) if it is
    malformed or ambiguous."""
    t = parse_template(text, dialect=AIVEN)
    check_template(t)
    return t


def aiven_render(t: KeyTemplate, topic: str = "", partition: int = 0, start_offset: int = 0,
                 timestamp: datetime | None = None, key: str = "") -> str:
    """The object name the sink writes for these values (after the prefix, before the compression suffix)."""
    ts = timestamp or datetime(1970, 1, 1, tzinfo=UTC)
    values: dict[str, object] = {"topic": topic, "partition": partition, "start_offset": start_offset, "key": key}
    values.update({f"timestamp:{u}": f(ts) for u, f in _UNIT_OF.items()})
    return render_key(t, values)


def aiven_parse(t: KeyTemplate, name: str) -> dict[str, Any] | None:
    """The values of an object name (after the prefix and compression suffix), or None if it does not fit;
    NameOutOfRange if its partition or start offset is beyond Kafka's ranges.
    Keys: topic, partition, start_offset (ints), timestamp (dict unit -> int), key."""
    try:
        values = parse_key(t, name)
    except ValueError:
        return None
    out: dict[str, Any] = {}
    for slot, v in values.items():
        if slot.startswith("timestamp:"):
            out.setdefault("timestamp", {})[slot.removeprefix("timestamp:")] = int(str(v))
        else:
            out[slot] = v
    _in_kafka_range(out.get("partition"), out.get("start_offset"))
    return out


_CONFLUENT_EXT = {"avro": ".avro", "json": ".json", "parquet": ".parquet", "bytes": ".bin"}


def confluent_format(ext: str) -> tuple[str, bool] | None:
    """The Confluent format an extension names (`.avro`, `.json[.gz]`, `.<codec>.parquet`, `.bin[.gz]`) and
    whether the object is gzipped (s3.compression.type, json and bytes only), or None."""
    gz = ext.endswith(".gz")
    base = ext[:-3] if gz else ext
    for fmt, e in _CONFLUENT_EXT.items():
        if base == e:
            return None if gz and fmt in ("avro", "parquet") else (fmt, gz)
    if not gz and re.fullmatch(r"\.[a-z0-9]+\.parquet", base):  # <codec>.parquet, e.g. .snappy.parquet
        return "parquet", False
    return None


@dataclass(frozen=True)
class ForeignName:
    """What an object's name says: its Kafka partition, the offset in its name (first record: Aiven, Confluent;
    last: Lenses), its directory (partitioners spread one Kafka partition over several) and what it holds."""

    partition: int
    offset: int
    directory: str
    kind: str = "values"  # confluent: "values", "keys" or "headers"
    fmt: str | None = None  # confluent: the object's format (a sidecar's may differ from the values')
    gzipped: bool = False


def confluent_parse(topic: str, fmt: str, gzipped: bool, rest: str, partitioned: bool = False,
                    ) -> ForeignName | None:
    """A Confluent object name (after the prefix), or None; NameOutOfRange (see `aiven_parse`). `partitioned`: the
    encoded partition is any directories (time/field partitioners), else `partition=<p>`."""
    m = re.fullmatch(r"([^/]+)/(.+)/([^/+]+)\+(0|[1-9][0-9]*)\+([0-9]+)((?:\.[^./]+)+)", rest)
    if m is None or m[1] != topic or m[3] != topic:
        return None
    if not partitioned and m[2] != f"partition={m[4]}":
        return None
    exts, kind = m[6], "values"
    for marker in (".keys", ".headers"):
        if exts.startswith(marker + "."):
            kind, exts = marker[1:], exts[len(marker):]
    got = confluent_format(exts)
    if got is None or got[1] != (gzipped and got[0] in ("json", "bytes")):
        return None
    if (kind == "values" and got[0] != fmt) or (kind == "headers" and got[0] == "bytes"):
        return None
    _in_kafka_range(int(m[4]), int(m[5]))
    return ForeignName(int(m[4]), int(m[5]), m[2], kind, *got)


def lenses_parse(topic: str, fmt: str, gzipped: bool, rest: str, key_suffix: str = "") -> ForeignName | None:
    """A Lenses object name (after the prefix), default or PARTITIONBY naming, or None; NameOutOfRange (see
    `aiven_parse`). Numbers may be left-padded with '0' (the sink's default padding). The extension is the format's
    name (`.gz` for gzipped json)."""
    ext = "gz" if gzipped else fmt
    tail = re.escape(key_suffix) + r"\." + re.escape(ext)
    m = re.fullmatch(r"([^/]+)/([0-9]+)/([0-9]+)(?:_-?[0-9]+_-?[0-9]+)?" + tail, rest)
    if m is not None:
        if m[1] != topic:
            return None
        _in_kafka_range(int(m[2]), int(m[3]))
        return ForeignName(int(m[2]), int(m[3]), f"{m[1]}/{int(m[2])}")
    m = re.fullmatch(r"(?:(.*)/)?([^/()]+)\(([0-9]+)_([0-9]+)\)" + tail, rest)
    if m is None or m[2] != topic:
        return None
    _in_kafka_range(int(m[3]), int(m[4]))
    return ForeignName(int(m[3]), int(m[4]), m[1] or "")
