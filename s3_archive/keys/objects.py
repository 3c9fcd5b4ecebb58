"""Where a window's objects live in the bucket. Pure functions of (prefix, topic, window, layout).

    <prefix><topic>/kafka_partition=<p>/<topic>+<p>+<start:019d>-<end:019d>+<part:05d><ext>   data (default layout)
    <prefix>_manifests/<topic>/kafka_partition=<p>/<window key>.json              commit record
    <prefix>_staging/<topic>/<window key>/<attempt>/                              one attempt's Spark output
    <prefix>_dead_letter/<topic>/kafka_partition=<p>/<same name as data>.parquet  undecodable records (raw)
    <prefix>_schemas/<sha256>.json                                                Schema Registry schemas used
    <prefix>_store_probe/<random hex>                                             the store check's object, for a moment
    <prefix>_erasure/salt, <prefix>_erasure/<topic>/<time>-<id>.json              erasure's salt and audit records
    a window's objects rewritten by an erasure: the same name with `.g<generation>-<attempt>` before the suffix
    format bytes: <topic>+<p>+<start>-<end>+<offset:019d>.bin, one object per record

The default layout is the template `{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-
{{end_offset}}+{{part}}` with partition_by [kafka_partition] (`DEFAULT_LAYOUT`): one engine names every data
object. The directory is `kafka_partition=`, not Connect's `partition=`, because every record also carries a
`partition` column, and Hive-style readers reject a partition column that repeats a data column. The window's
start and end offsets in the name mean a re-run of the same window rewrites the same keys, and no other window's
objects share the name stem. See docs/layout.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from s3_archive.keys.buckets import join_bucket, parse_path, path_from_encoded, split_bucket
from s3_archive.keys.layout import KafkaPartition, OutputLayout
from s3_archive.keys.template import KeyTemplate, parse_key, render_key
from s3_archive.keys.values import decode_value, encode_value
from s3_archive.model.windows import OFFSET_DIGITS, OffsetWindow

MANIFESTS = "_manifests"
STAGING = "_staging"
DEAD_LETTER = "_dead_letter"
SCHEMAS = "_schemas"
STORE_PROBE = "_store_probe"  # io/store_probe.py: one object for a moment, removed again
VERIFY = "_verify"  # archive/verify.py: where the `verify` check's rotation goes on, per topic
ERASURE = "_erasure"  # erasure/erase_run.py: the salt of the keys' hashes and one audit record per erasure
_GENERATION = re.compile(r"\.g([0-9]+)(?:-[0-9a-z]+)?$")
DRILL = "_drill"  # restore/drill.py: where the restore drill's rotation goes on, per topic
DEFAULT_LAYOUT = OutputLayout()  # <topic>/kafka_partition=<p>/<topic>+<p>+<start:019d>-<end:019d>+<part:05d>


def schema_key(prefix: str, sha256: str) -> str:
    """A Schema Registry schema that windows used, named by its content's hash: written once, shared by windows."""
    return f"{prefix}{SCHEMAS}/{sha256}.json"


def verify_state_key(prefix: str, topic: str) -> str:
    return f"{prefix}{VERIFY}/{topic}.json"


def erasure_salt_key(prefix: str) -> str:
    return f"{prefix}{ERASURE}/salt"


def erasure_audit_key(prefix: str, topic: str, name: str) -> str:
    return f"{prefix}{ERASURE}/{topic}/{name}.json"


def generation_key(key: str, suffix: str, generation: int, attempt: str = "") -> str:
    """The name of object `key` (ending with `suffix`) rewritten as generation `generation` of its window by the
    attempt `attempt` (lowercase letters and digits): `.g<n>-<attempt>` before the suffix, replacing an earlier
    generation's; generation 1 is the name the archive wrote. Two attempts at the same generation never share a
    name, so neither overwrites the other's objects."""
    stem = key[:len(key) - len(suffix)] if suffix and key.endswith(suffix) else key
    stem = _GENERATION.sub("", stem)
    return stem + (f".g{generation}" + (f"-{attempt}" if attempt else "") if generation > 1 else "") + suffix


def generation_of_key(key: str, suffix: str) -> int:
    """The generation an object's name says it belongs to (1: no `.g<n>`)."""
    stem = key[:len(key) - len(suffix)] if suffix and key.endswith(suffix) else key
    m = _GENERATION.search(stem)
    return int(m.group(1)) if m else 1
def drill_state_key(prefix: str, topic: str) -> str:
    return f"{prefix}{DRILL}/{topic}.json"


def store_probe_key(prefix: str, token: str) -> str:
    """The object the store check (io/store_probe.py) writes and removes: under the archive's prefix, so the
    least-privilege policy covers it, and beside no topic's objects."""
    return f"{prefix}{STORE_PROBE}/{token}"


def partition_dir(prefix: str, topic: str, partition: int) -> str:
    return f"{prefix}{topic}/kafka_partition={partition}/"


def window_object_stem(prefix: str, topic: str, window: OffsetWindow) -> str:
    """Every data object of the window in the default layout starts with this (and no other window's does)."""
    return window_scan_prefix(None, prefix, topic, window)


def window_bucket(layout: OutputLayout, window: OffsetWindow) -> str:
    """The bucket of every record of the window when only the Kafka partition splits it (the default layout)."""
    if any(not isinstance(d, KafkaPartition) for d in layout.partition_by) or layout.template_slots:
        raise ValueError(f"the layout {layout.template!r} splits a window by record content; give the bucket")
    return join_bucket([encode_value(str(window.partition))] * len(layout.partition_by))


def record_object_key(prefix: str, topic: str, window: OffsetWindow, offset: int, suffix: str) -> str:
    """The `bytes` format's one object per record: named by the record's offset instead of a part number."""
    if not window.start <= offset < window.end:
        raise ValueError(f"offset {offset} is outside window {window.key}")
    return f"{window_object_stem(prefix, topic, window)}{offset:0{OFFSET_DIGITS}d}{suffix}"


def dead_letter_stem(prefix: str, topic: str, window: OffsetWindow) -> str:
    """Records of the window whose value did not decode: raw envelope, parquet, under the dead-letter prefix."""
    return window_object_stem(f"{prefix}{DEAD_LETTER}/", topic, window)


def dead_letter_key(prefix: str, topic: str, window: OffsetWindow, part: int) -> str:
    return object_key(f"{prefix}{DEAD_LETTER}/", topic, window, part, ".parquet")


def manifest_key(prefix: str, topic: str, window: OffsetWindow) -> str:
    return f"{prefix}{MANIFESTS}/{topic}/kafka_partition={window.partition}/{window.key}.json"


def manifest_prefix(prefix: str, topic: str) -> str:
    return f"{prefix}{MANIFESTS}/{topic}/"


def partition_manifest_prefix(prefix: str, topic: str, partition: int) -> str:
    return f"{manifest_prefix(prefix, topic)}kafka_partition={partition}/"


def manifests_from(prefix: str, topic: str, partition: int, offset: int) -> str:
    """A listing's StartAfter under `partition_manifest_prefix`: the keys after it are the manifests of the windows
    starting at or after `offset` (window keys sort by start offset)."""
    key = OffsetWindow(partition, offset, offset + 1).key
    return partition_manifest_prefix(prefix, topic, partition) + key[:key.rindex("-")]


def staging_prefix(prefix: str, topic: str, window: OffsetWindow, attempt: str | None = None) -> str:
    base = f"{prefix}{STAGING}/{topic}/{window.key}/"
    return base if attempt is None else f"{base}{attempt}/"


def object_key(prefix: str, topic: str, window: OffsetWindow, part: int, suffix: str,
               layout: OutputLayout | None = None, bucket: str | None = None) -> str:
    """The final key of one part of one bucket of a window. `layout` None is the default layout; `bucket` is the
    record bucket as archive.buckets.bucket_column gives it (None: the window's only bucket, when nothing but the
    Kafka partition splits it)."""
    layout = layout or DEFAULT_LAYOUT
    if bucket is None:
        bucket = window_bucket(layout, window)
    parts = split_bucket(layout, bucket)
    n = len(layout.partition_by)
    values: dict[str, object] = {"topic": topic, "partition": window.partition, "start_offset": window.start,
                                 "end_offset": window.end, "part": part}
    if n:
        values["partition_by"] = path_from_encoded(layout, parts[:n])
    for slot, enc in zip(layout.template_slots, parts[n:], strict=True):
        values[slot] = enc if slot == "key" else decode_value(enc)
    return prefix + render_key(layout.key_template, values) + suffix


def parse_object_key(layout: OutputLayout | None, prefix: str, key: str, suffix: str) -> dict[str, object]:
    """The values an object key was rendered from: topic, partition, start_offset, end_offset and part (if the
    template has them) as int, `partition_by` as render_path's values, `key` decoded, `timestamp:<unit>` text."""
    if not key.startswith(prefix) or not key.endswith(suffix) or len(key) < len(prefix) + len(suffix):
        raise ValueError(f"{key!r} does not start with {prefix!r} and end with {suffix!r}")
    layout = layout or DEFAULT_LAYOUT
    rel = key[len(prefix):len(key) - len(suffix) if suffix else None]
    values = parse_key(layout.key_template, rel)
    if "partition_by" in values:
        values["partition_by"] = parse_path(layout, str(values["partition_by"]))
    if "key" in values:
        values["key"] = decode_value(str(values["key"]))
    return values


def window_scan_prefix(layout: OutputLayout | None, prefix: str, topic: str, window: OffsetWindow) -> str:
    """The longest key prefix shared by every object of this window: the template rendered up to its first
    value that is not fixed by the window (leading kafka_partition dimensions of {{partition_by}} are). List under
    it and keep keys whose parse_object_key gives this window to find stale objects of earlier attempts."""
    layout = layout or DEFAULT_LAYOUT
    values = {"topic": topic, "partition": window.partition, "start_offset": window.start, "end_offset": window.end}
    out = []
    for p in layout.key_template.parts:
        if isinstance(p, str):
            out.append(p)
        elif p.slot in values:
            out.append(render_key(KeyTemplate("", (p,), layout.key_template.padding), values))
        elif p.name == "partition_by":
            fixed = []
            for d in layout.partition_by:
                if not isinstance(d, KafkaPartition):
                    break
                fixed.append(f"kafka_partition={window.partition}" if d.hive else str(window.partition))
            if len(fixed) < len(layout.partition_by):
                out.append("".join(f + "/" for f in fixed))
                break
            out.append("/".join(fixed))
        else:
            break
    return prefix + "".join(out)


@dataclass(frozen=True)
class WindowLocation:
    """Where one window of an archive lives: the bucket, the archive's prefix, the topic, the window, and how its
    data objects are named (the layout, None for the default one, and the suffix every data object ends with).
    What the write tasks, the commit and the checks pass around instead of those six values."""

    bucket: str
    prefix: str
    topic: str
    window: OffsetWindow
    suffix: str
    layout: OutputLayout | None = None

    @property
    def manifest_key(self) -> str:
        return manifest_key(self.prefix, self.topic, self.window)

    @property
    def scan_prefix(self) -> str:
        """Every data object of the window has a key under this prefix (window_scan_prefix)."""
        return window_scan_prefix(self.layout, self.prefix, self.topic, self.window)

    @property
    def dead_letter_stem(self) -> str:
        return dead_letter_stem(self.prefix, self.topic, self.window)

    def object_key(self, part: int, record_bucket: str | None = None) -> str:
        """The data object of part `part` of the record bucket `record_bucket` (object_key)."""
        return object_key(self.prefix, self.topic, self.window, part, self.suffix, self.layout, record_bucket)

    def record_object_key(self, offset: int) -> str:
        return record_object_key(self.prefix, self.topic, self.window, offset, self.suffix)

    def dead_letter_key(self, part: int) -> str:
        return dead_letter_key(self.prefix, self.topic, self.window, part)

    def owns(self, key: str) -> bool:
        """Whether a data key under `scan_prefix` names an object of this window (whatever its part and generation)."""
        if self.layout is None:
            return key.startswith(window_object_stem(self.prefix, self.topic, self.window))
        try:
            v = parse_object_key(self.layout, self.prefix, generation_key(key, self.suffix, 1), self.suffix)
        except ValueError:
            return False  # not an object of this layout (another window's name that only shares the prefix)
        w = self.window
        return (v.get("topic", self.topic), v.get("partition"), v.get("start_offset"), v.get("end_offset", w.end)) \
            == (self.topic, w.partition, w.start, w.end)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
