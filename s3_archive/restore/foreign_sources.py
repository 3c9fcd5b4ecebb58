"""Restore from archives written by Kafka Connect S3 sinks: list the source's objects, plan them as windows, get cold
ones restored (S3 RestoreObject), and feed the windows to `restore_sources`, the same exactly-once restore as ours.

A window is one object: (partition, start offset from the name, up to the next object's start offset). The last
object of a partition has an open end: the restore records it as done up to its last record. A record keeps the
offset its object stores (Aiven's `offset` field), else gets its object's start offset + its position, so the
same object always gives the same offsets and the ledger makes a re-run restore each record exactly once.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from s3_archive.config.foreign import COMPRESSIONS, ForeignSource
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.foreign_keys import NameOutOfRange, aiven_parse, confluent_parse
from s3_archive.keys.template import KeyTemplate
from s3_archive.model.errors import InvalidForeignObject, InvalidRestore
from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION, OffsetWindow
from s3_archive.restore import cold
from s3_archive.restore.batch import WindowSource, batches_of
from s3_archive.restore.cold import ColdOptions, ColdReport, ListedObject
from s3_archive.restore.foreign_records import Decoder, decompress, numbered, with_keys
from s3_archive.restore.readers import PARQUET_BATCH
from s3_archive.restore.request import ArchivedRecord, Fault, RestoreRequest, WindowReport, no_fault
from s3_archive.restore.run import restore_sources


@dataclass(frozen=True)
class ForeignWindow:
    """One object of the source: its records are the source partition's offsets [start, end)."""

    window: OffsetWindow
    obj: ListedObject
    open_end: bool  # the partition's last object: its end is its last record + 1
    keys_obj: ListedObject | None = None  # confluent: the .keys.<ext> sibling

    @property
    def objects(self) -> list[ListedObject]:
        return [self.obj] + ([self.keys_obj] if self.keys_obj else [])


@dataclass
class Plan:
    windows: list[ForeignWindow]
    # Listed keys that are not restored, each with why: other topics, other files, stray objects, and names that fit
    # the layout but carry a partition or offset no Kafka record can have.
    ignored: dict[str, str]

    def out_of_range(self) -> dict[str, str]:
        return {k: why for k, why in self.ignored.items() if why.startswith(OUT_OF_RANGE)}


OUT_OF_RANGE = "out of range: "
# How many ignored keys (with their reasons) the log and the run's metadata list.
SHOWN_IGNORED = 20


def _out_of_range(partition: int, start: int) -> str | None:
    """Why a parsed (partition, start offset), within Kafka's ranges (the parsers refuse the rest), cannot be a
    restore window, or None."""
    if partition > MAX_PARTITION:
        return (f"{OUT_OF_RANGE}partition {partition} is beyond {MAX_PARTITION}, the largest partition a restore "
                "window holds (Kafka's own limit is 2147483647)")
    if start >= MAX_OFFSET:
        return f"{OUT_OF_RANGE}start offset {start} is beyond {MAX_OFFSET - 1}, the largest offset of a Kafka record"
    return None


def _coordinates(source: ForeignSource, tmpl: KeyTemplate | None, rest: str) -> tuple[tuple[int, int], str] | str:
    """((partition, start offset), 'values'|'keys'|'headers') of an object name after the prefix, or why it is
    not one of the source's objects; NameOutOfRange from the parsers. `tmpl`: the aiven source's template."""
    if tmpl is not None:
        suffix = COMPRESSIONS[source.compression]
        if not rest.endswith(suffix):
            return f"does not end in {suffix!r} (compression {source.compression})"
        got = aiven_parse(tmpl, rest[:len(rest) - len(suffix)] if suffix else rest)
        if got is None or got.get("topic", source.topic) != source.topic:
            return f"not a name the template {tmpl.text!r} gives topic {source.topic!r}"
        return (got["partition"], got["start_offset"]), "values"
    parsed = confluent_parse(source.topic, source.format, source.compression == "gzip", rest)
    if parsed is None:
        return f"not a Confluent {source.format} object name of topic {source.topic!r}"
    return parsed[:2], parsed[2]


def plan(source: ForeignSource, listing: Iterable[ListedObject]) -> Plan:
    """The source's objects as windows in (partition, start offset) order. Two objects claiming the same
    (partition, start offset) are refused: which one holds the records cannot be guessed."""
    prefix = source.key_prefix
    found: dict[tuple[int, int], ListedObject] = {}
    keys_files: dict[tuple[int, int], ListedObject] = {}
    ignored: dict[str, str] = {}
    tmpl = source.key_template if source.layout == "aiven" else None
    for o in listing:
        if not o.key.startswith(prefix):
            ignored[o.key] = f"outside the prefix {prefix!r}"
            continue
        try:
            named = _coordinates(source, tmpl, o.key[len(prefix):])
        except NameOutOfRange as e:
            named = f"{OUT_OF_RANGE}{e}"
        if isinstance(named, str):
            ignored[o.key] = named
            continue
        coords, kind = named
        if kind == "headers":
            ignored[o.key] = "a headers file (not read)"
            continue
        why = _out_of_range(*coords)
        if why is not None:
            ignored[o.key] = why
            continue
        target = keys_files if kind == "keys" else found
        if coords in target:
            raise InvalidForeignObject(
                f"s3://{source.bucket}/{target[coords].key} and s3://{source.bucket}/{o.key} both claim partition "
                f"{coords[0]} start offset {coords[1]}; remove the one that is not the sink's")
        target[coords] = o
    windows: list[ForeignWindow] = []
    ordered = sorted(found)
    for i, (p, start) in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) and ordered[i + 1][0] == p else None
        end = nxt[1] if nxt else MAX_OFFSET
        windows.append(ForeignWindow(OffsetWindow(p, start, end), found[(p, start)], nxt is None,
                                     keys_files.get((p, start))))
    ignored |= {o.key: "a keys file without its values object" for c, o in keys_files.items() if c not in found}
    return Plan(windows, ignored)


def list_source(s3: S3Client, source: ForeignSource) -> list[ListedObject]:
    return [ListedObject(o["Key"], o["Size"], o.get("StorageClass", "STANDARD"))
            for o in list_objects(s3, source.bucket, source.key_prefix)]


def prepare_cold(s3: S3Client, source: ForeignSource, windows: list[ForeignWindow], wait_seconds: float, log: Any,
                 poll_seconds: float = 10.0, days: int | None = None, tier: str | None = None) -> ColdReport:
    """`cold.prepare_cold` for the objects of `windows` (storage classes from the listing); `days` and `tier`
    override the source's `cold_restore_days` / `cold_restore_tier`."""
    opts = ColdOptions(wait_seconds, days or source.cold_restore_days, tier or source.cold_restore_tier,
                       poll_seconds)
    return cold.prepare_cold(s3, source.bucket, [o for fw in windows for o in fw.objects], opts,
                             f"{source.name!r} in s3://{source.bucket}/{source.key_prefix}", log)


def _get(s3: S3Client, bucket: str, o: ListedObject) -> bytes:
    data = s3.get_object(Bucket=bucket, Key=o.key)["Body"].read()
    if len(data) != o.size:
        raise InvalidForeignObject(f"s3://{bucket}/{o.key} is {len(data)} bytes, the listing said {o.size}: it "
                                   "changed while restoring")
    return data


# What `error_tolerance: skip` skips: an object whose bytes do not read as the source's layout and format.
UNREADABLE = (InvalidForeignObject, ValueError, KeyError, TypeError, EOFError, OSError, zlib.error)


def window_source(s3: S3Client, source: ForeignSource, fw: ForeignWindow,
                  skipped: dict[str, str] | None = None) -> WindowSource:
    """`skipped` (error_tolerance: skip): an object whose records cannot be read is read whole before any record
    is produced, and on an error recorded there (key -> error) with no record: the restore moves past it."""
    decoder = Decoder(source)
    what = f"s3://{source.bucket}/{fw.obj.key}"

    def decoded(values_data: bytes, keys_data: bytes | None) -> Iterator[ArchivedRecord]:
        values = decoder.decode(decompress(values_data, source.compression), what)
        keys = None
        if keys_data is not None:
            keys = decoder.decode(decompress(keys_data, source.compression),
                                  f"s3://{source.bucket}/{fw.keys_obj.key}")  # type: ignore[union-attr]
        return numbered(with_keys(values, keys, what), fw.window, what, ArchivedRecord)

    def records() -> Iterator[ArchivedRecord]:
        # One object in memory at a time (sink objects are flush-sized).
        values_data = _get(s3, source.bucket, fw.obj)
        keys_data = _get(s3, source.bucket, fw.keys_obj) if fw.keys_obj is not None else None
        if skipped is None:
            yield from decoded(values_data, keys_data)
            return
        try:
            got = list(decoded(values_data, keys_data))
        except UNREADABLE as e:
            skipped[fw.obj.key] = f"{type(e).__name__}: {e}"
            return
        yield from got

    return WindowSource(fw.window, lambda: batches_of(records(), PARQUET_BATCH), open_end=fw.open_end, objects=1)


def discover(s3: S3Client, source: ForeignSource) -> Plan:
    return plan(source, list_source(s3, source))


def shown_ignored(p: Plan) -> dict[str, str]:
    """The ignored keys a user is shown (log, metadata): those out of range first, then the others."""
    ranked = sorted(p.ignored.items(), key=lambda kv: not kv[1].startswith(OUT_OF_RANGE))
    return dict(ranked[:SHOWN_IGNORED])


def log_ignored(source: ForeignSource, p: Plan, log: Any) -> None:
    bad = p.out_of_range()
    for key, why in list(bad.items())[:SHOWN_IGNORED]:
        log.warning(f"{source.name}: ignoring s3://{source.bucket}/{key}: {why}")
    if len(bad) > SHOWN_IGNORED:
        log.warning(f"{source.name}: ignoring {len(bad) - SHOWN_IGNORED} more objects with out-of-range names")
    others = [k for k in p.ignored if k not in bad]
    if others:
        log.info(f"{source.name}: ignoring {len(others)} objects under the prefix that are not objects of "
                 f"topic {source.topic!r} in this layout, e.g. {others[:3]}")


def restore_foreign(kafka: KafkaResource, s3: S3Client, source: ForeignSource, request: RestoreRequest, log: Any,
                    wait_for_cold_seconds: float = 0.0, fault: Fault = no_fault,
                    cold_poll_seconds: float = 10.0, cold_restore_days: int | None = None,
                    cold_restore_tier: str | None = None, planned: Plan | None = None,
                    skipped: dict[str, str] | None = None) -> Iterator[WindowReport | ColdReport]:
    """Restore every object of `source` (those the offset filter can match), in (partition, offset) order.
    Yields the cold-storage report first, then each window's report. `planned`: the source's `discover`ed plan
    (else it is listed here); its ignored objects are logged, those with out-of-range names as warnings.
    `skipped`: with the source's `error_tolerance: skip`, the objects skipped as unreadable are put there (key ->
    error) and logged as warnings."""
    if request.source_topic != source.topic:
        raise InvalidRestore(f"request is for topic {request.source_topic!r}, source {source.name!r} holds "
                             f"{source.topic!r}")
    if request.filters.has_time and not source.has_timestamps:
        raise InvalidRestore(f"source {source.name!r} ({source.layout}, {source.format}, fields "
                             f"{list(source.fields) if source.layout == 'aiven' else ['value']}) stores no record "
                             "timestamps: a time filter cannot be applied. Use from_offset/to_offset")
    p = planned if planned is not None else discover(s3, source)
    if not p.windows:
        raise InvalidForeignObject(
            f"no object of topic {source.topic!r} under s3://{source.bucket}/{source.key_prefix} fits the "
            f"{source.layout} layout" + (f" (template {source.key_template.text!r})" if source.layout == "aiven"
                                        else "") + f"; {len(p.ignored)} other objects there, e.g. "
            f"{list(shown_ignored(p).items())[:3]}")
    log_ignored(source, p, log)
    wanted = [fw for fw in p.windows if request.filters.offset_scope(fw.window) is not None]
    yield prepare_cold(s3, source, wanted, wait_for_cold_seconds, log, cold_poll_seconds, cold_restore_days,
                       cold_restore_tier)
    if source.error_tolerance == "skip" and skipped is None:
        skipped = {}
    before = set(skipped or {})
    yield from restore_sources(kafka, request, [window_source(s3, source, fw, skipped) for fw in wanted], log, fault)
    for key in [k for k in skipped or {} if k not in before]:
        log.warning(f"{source.name}: skipped s3://{source.bucket}/{key} (error_tolerance: skip): {skipped[key]}")
