"""Restore from archives written by Kafka Connect S3 sinks: list the source's objects, plan them as windows, get cold
ones restored (S3 RestoreObject), and feed the windows to `restore_sources`, the same exactly-once restore as ours.

A window is one object: (partition, start offset from the name, up to the next object's start offset). The last
object of a partition has an open end: the restore records it as done up to its last record. Lenses names an object
by its last offset instead: its window runs from the partition's previous object's last offset + 1 to its own + 1,
and the partition's first object has an open start. A record keeps the offset its object stores (Aiven's `offset`
field, Lenses' `metadata.offset`), else gets its object's start offset + its position (Lenses: its end - the
records after it), so the same object always gives the same offsets and the ledger makes a re-run restore each
record exactly once. A partitioner may spread one Kafka partition over several directories; their objects must
not overlap (checked while reading: `numbered`), else their records cannot be put in offset order.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from s3_archive.config.foreign import COMPRESSIONS, ForeignSource
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.foreign_keys import ForeignName, NameOutOfRange, aiven_parse, confluent_parse, lenses_parse
from s3_archive.model.errors import ForeignObjectsOverlap, InvalidForeignObject, InvalidRestore
from s3_archive.model.logger import Logger
from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION, OffsetWindow
from s3_archive.restore import cold
from s3_archive.restore.batch import WindowSource, batches_of
from s3_archive.restore.cold import ColdOptions, ColdReport, ListedObject
from s3_archive.restore.foreign_records import (
    Decoder,
    decompress,
    numbered,
    sidecar_headers,
    sidecar_keys,
    sidecar_rows,
    with_sidecars,
)
from s3_archive.restore.readers import PARQUET_BATCH
from s3_archive.restore.request import (
    NO_HOOKS,
    ArchivedRecord,
    RestoreContext,
    RestoreHooks,
    RestoreRequest,
    WindowReport,
)
from s3_archive.restore.run import restore_sources


@dataclass(frozen=True)
class Sidecar:
    """Confluent's `.keys.<ext>` / `.headers.<ext>` object beside a values object, in its own format."""

    obj: ListedObject
    fmt: str
    gzipped: bool


@dataclass(frozen=True)
class ForeignWindow:
    """One object of the source: its records are the source partition's offsets [start, end)."""

    window: OffsetWindow
    obj: ListedObject
    open_end: bool  # the partition's last object (names give first offsets): its end is its last record + 1
    keys: Sidecar | None = None
    headers: Sidecar | None = None
    # Lenses names an object by its last offset: the partition's first object starts at its first record (the
    # window's start, 0, is a placeholder), and records are numbered back from the end.
    open_start: bool = False
    strict: bool = False  # a record at or past the end is an error, not the next object's (see `numbered`)
    spread: bool = False  # the partition's objects are in several directories

    @property
    def objects(self) -> list[ListedObject]:
        return [self.obj] + [c.obj for c in (self.keys, self.headers) if c is not None]


@dataclass
class Plan:
    windows: list[ForeignWindow]
    # Listed keys that are not restored, each with why: other topics, other files, stray objects, and names that fit
    # the layout but carry a partition or offset no Kafka record can have.
    ignored: dict[str, str]
    # With `error_tolerance: skip`, the objects a restore of the plan skipped as unreadable, and why (key -> error).
    skipped: dict[str, str] = field(default_factory=dict)

    def out_of_range(self) -> dict[str, str]:
        return {k: why for k, why in self.ignored.items() if why.startswith(OUT_OF_RANGE)}

    def taken_over(self) -> list[str]:
        """The keys left out as the archive's: named at or past where the archive that took over starts."""
        return [k for k, why in self.ignored.items() if why.startswith(TAKEN_OVER)]


OUT_OF_RANGE = "out of range: "
TAKEN_OVER = "the archive's: "
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


def parse_name(source: ForeignSource, rest: str) -> ForeignName | str:
    """What an object name (after the prefix) says, or why it is not one of the source's objects."""
    if source.layout == "aiven":
        suffix = COMPRESSIONS[source.compression]
        if not rest.endswith(suffix):
            return f"does not end in {suffix!r} (compression {source.compression})"
        tmpl = source.key_template
        got = aiven_parse(tmpl, rest[:len(rest) - len(suffix)] if suffix else rest)
        if got is None or got.get("topic", source.topic) != source.topic:
            return f"not a name the template {tmpl.text!r} gives topic {source.topic!r}"
        return ForeignName(got["partition"], got["start_offset"], rest.rpartition("/")[0])
    gz = source.compression == "gzip"
    if source.layout == "confluent":
        name = confluent_parse(source.topic, source.format, gz, rest, source.partitioner != "default")
        what = f"a Confluent {source.format} object name ({source.partitioner} partitioner)"
    else:
        name = lenses_parse(source.topic, source.format, gz, rest, source.key_suffix)
        what = f"a Lenses {source.format} object name"
    return name if name is not None else f"not {what} of topic {source.topic!r}"


def plan(source: ForeignSource, listing: Iterable[ListedObject], boundary: dict[int, int] | None = None) -> Plan:
    """The source's objects as windows in (partition, offset) order. Two objects claiming the same
    (partition, offset) are refused: which one holds the records cannot be guessed. `boundary`: per Kafka
    partition, where the archive that took over from the sink starts (`ForeignSource.archive`): objects named at or
    past it are the archive's own (under a shared prefix) and left out, and the partition's last object ends there."""
    boundary = boundary or {}
    prefix = source.key_prefix
    found: dict[tuple[int, int], tuple[ListedObject, ForeignName]] = {}
    sidecars: dict[tuple[str, str, int, int], Sidecar] = {}
    ignored: dict[str, str] = {}
    for o in listing:
        if not o.key.startswith(prefix):
            ignored[o.key] = f"outside the prefix {prefix!r}"
            continue
        try:
            name = parse_name(source, o.key[len(prefix):])
        except NameOutOfRange as e:
            name = f"{OUT_OF_RANGE}{e}"
        if isinstance(name, str):
            ignored[o.key] = name
            continue
        coords = (name.partition, name.offset)
        why = _out_of_range(*coords)
        if why is not None:
            ignored[o.key] = why
            continue
        if coords[1] >= boundary.get(coords[0], MAX_OFFSET):
            ignored[o.key] = (f"{TAKEN_OVER}partition {coords[0]} offset {coords[1]} is at or past "
                              f"{boundary[coords[0]]}, where archive {source.archive!r} took over")
            continue
        if name.kind != "values":
            sidecars[(name.kind, name.directory, *coords)] = Sidecar(o, name.fmt or "", name.gzipped)
            continue
        if coords in found:
            raise InvalidForeignObject(
                f"s3://{source.bucket}/{found[coords][0].key} and s3://{source.bucket}/{o.key} both claim partition "
                f"{coords[0]} {'last' if source.layout == 'lenses' else 'start'} offset {coords[1]}; remove the one "
                "that is not the sink's")
        found[coords] = (o, name)
    windows: list[ForeignWindow] = []
    used: set[tuple[str, str, int, int]] = set()
    by_partition: dict[int, list[tuple[int, ListedObject, ForeignName]]] = {}
    for (p, off), (o, name) in sorted(found.items()):
        by_partition.setdefault(p, []).append((off, o, name))
    for p, objs in by_partition.items():
        spread = len({name.directory for _, _, name in objs}) > 1
        for i, (off, o, name) in enumerate(objs):
            nxt = objs[i + 1] if i + 1 < len(objs) else None
            cars = {kind: sidecars.get((kind, name.directory, p, off)) for kind in ("keys", "headers")}
            used |= {(kind, name.directory, p, off) for kind, c in cars.items() if c is not None}
            if source.layout == "lenses":
                start = objs[i - 1][0] + 1 if i else 0
                windows.append(ForeignWindow(OffsetWindow(p, start, off + 1), o, False, open_start=i == 0,
                                             strict=True, spread=spread))
            else:
                end = nxt[0] if nxt else boundary.get(p, MAX_OFFSET)
                windows.append(ForeignWindow(OffsetWindow(p, off, end), o, end == MAX_OFFSET,
                                             cars["keys"], cars["headers"],
                                             strict=nxt is not None and nxt[2].directory != name.directory,
                                             spread=spread))
    ignored |= {c.obj.key: f"a {kind} file without its values object" for (kind, *rest), c in sidecars.items()
                if (kind, *rest) not in used}
    return Plan(windows, ignored)


def list_source(s3: S3Client, source: ForeignSource) -> list[ListedObject]:
    return [ListedObject(o["Key"], o["Size"], o.get("StorageClass", "STANDARD"))
            for o in list_objects(s3, source.bucket, source.key_prefix)]


def source_cold(source: ForeignSource) -> ColdOptions:
    """A run's cold-storage options when it asks for nothing else: the source's `cold_restore_days` and
    `cold_restore_tier`; no waiting."""
    return ColdOptions(days=source.cold_restore_days, tier=source.cold_restore_tier)


def prepare_cold(s3: S3Client, source: ForeignSource, windows: list[ForeignWindow], opts: ColdOptions,
                 log: Logger) -> ColdReport:
    """`cold.prepare_cold` for the objects of `windows` (storage classes from the listing)."""
    return cold.prepare_cold(s3, source.bucket, [o for fw in windows for o in fw.objects], opts,
                             f"{source.name!r} in s3://{source.bucket}/{source.key_prefix}", log)


def _get(s3: S3Client, bucket: str, o: ListedObject) -> bytes:
    data = s3.get_object(Bucket=bucket, Key=o.key)["Body"].read()
    if len(data) != o.size:
        raise InvalidForeignObject(f"s3://{bucket}/{o.key} is {len(data)} bytes, the listing said {o.size}: it "
                                   "changed while restoring")
    return data


# What `error_tolerance: skip` skips: an object whose bytes do not read as the source's layout and format (not an
# object S3 cannot serve, nor objects that overlap: those fail the run, see records() below).
UNREADABLE = (InvalidForeignObject, ValueError, KeyError, TypeError, EOFError, zlib.error)


def window_source(s3: S3Client, source: ForeignSource, fw: ForeignWindow,
                  skipped: dict[str, str] | None = None) -> WindowSource:
    """`skipped` (error_tolerance: skip): an object whose records cannot be read is read whole before any record
    is produced, and on an error recorded there (key -> error) with no record: the restore moves past it."""
    decoder = Decoder(source)
    what = f"s3://{source.bucket}/{fw.obj.key}"

    def sidecar(c: Sidecar, data: bytes) -> Iterator[Any]:
        return sidecar_rows(decompress(data, "gzip" if c.gzipped else "none"), c.fmt, source.separator)

    def decoded(values_data: bytes, keys_data: bytes | None, headers_data: bytes | None) -> Iterator[ArchivedRecord]:
        values = decoder.decode(decompress(values_data, source.compression), what)
        keys = sidecar_keys(sidecar(fw.keys, keys_data), fw.keys.fmt, source.key_encoding) \
            if fw.keys and keys_data is not None else None
        headers = sidecar_headers(sidecar(fw.headers, headers_data)) if fw.headers and headers_data is not None \
            else None
        return numbered(with_sidecars(values, keys, headers, what), fw.window, what, ArchivedRecord,
                        from_end=source.layout == "lenses", strict=fw.strict, spread=fw.spread)

    def records() -> Iterator[ArchivedRecord]:
        # One object in memory at a time (sink objects are flush-sized). Its bytes are read first, outside the
        # tolerance: an object S3 cannot serve (a timeout, a refusal, changed while read) fails the run.
        data = [_get(s3, source.bucket, fw.obj),
                *[_get(s3, source.bucket, c.obj) if c else None for c in (fw.keys, fw.headers)]]
        if skipped is None:
            yield from decoded(*data)
            return
        try:
            got = list(decoded(*data))
        except ForeignObjectsOverlap:
            raise
        except UNREADABLE as e:
            skipped[fw.obj.key] = f"{type(e).__name__}: {e}"
            return
        yield from got

    return WindowSource(fw.window, lambda: batches_of(records(), PARQUET_BATCH), open_end=fw.open_end,
                        open_start=fw.open_start, objects=len(fw.objects))


def discover(s3: S3Client, source: ForeignSource, boundary: dict[int, int] | None = None) -> Plan:
    return plan(source, list_source(s3, source), boundary)


def planned_objects(s3: S3Client, source: ForeignSource) -> list[tuple[str, int, float]]:
    """One listing of the source's prefix: the objects a restore would read, as (key, size, last modified in epoch
    seconds), in key order."""
    listed = list(list_objects(s3, source.bucket, source.key_prefix))
    modified = {o["Key"]: o["LastModified"].timestamp() for o in listed}
    p = plan(source, [ListedObject(o["Key"], o["Size"], o.get("StorageClass", "STANDARD")) for o in listed])
    return [(k, size, modified[k]) for k, size in sorted((o.key, o.size) for fw in p.windows for o in fw.objects)]


def last_objects(s3: S3Client, source: ForeignSource, p: Plan) -> dict[int, tuple[str, int, int] | str]:
    """Per Kafka partition, the sink's last object read (one GET each): its key, its first record's offset and its
    record count; or why it cannot be read now (cold storage, empty)."""
    last = {fw.window.partition: fw for fw in p.windows}
    out: dict[int, tuple[str, int, int] | str] = {}
    for part, fw in sorted(last.items()):
        if any(o.storage_class in cold.COLD_CLASSES for o in fw.objects):
            out[part] = f"s3://{source.bucket}/{fw.obj.key} is in {fw.obj.storage_class}: not read"
            continue
        offsets = [o for batch in window_source(s3, source, fw).batches() for o in batch.offsets]
        out[part] = (fw.obj.key, offsets[0], len(offsets)) if offsets else f"s3://{source.bucket}/{fw.obj.key} is empty"
    return out


def shown_ignored(p: Plan) -> dict[str, str]:
    """The ignored keys a user is shown (log, metadata): those out of range first, then the others."""
    ranked = sorted(p.ignored.items(), key=lambda kv: not kv[1].startswith(OUT_OF_RANGE))
    return dict(ranked[:SHOWN_IGNORED])


def log_ignored(source: ForeignSource, p: Plan, log: Logger) -> None:
    bad = p.out_of_range()
    for key, why in list(bad.items())[:SHOWN_IGNORED]:
        log.warning(f"{source.name}: ignoring s3://{source.bucket}/{key}: {why}")
    if len(bad) > SHOWN_IGNORED:
        log.warning(f"{source.name}: ignoring {len(bad) - SHOWN_IGNORED} more objects with out-of-range names")
    others = [k for k in p.ignored if k not in bad]
    if others:
        log.info(f"{source.name}: ignoring {len(others)} objects under the prefix that are not objects of "
                 f"topic {source.topic!r} in this layout, e.g. {others[:3]}")


def restore_foreign(ctx: RestoreContext, source: ForeignSource, request: RestoreRequest,
                    cold: ColdOptions | None = None, planned: Plan | None = None,
                    hooks: RestoreHooks = NO_HOOKS) -> Iterator[WindowReport | ColdReport]:
    """Restore every object of `source` (those the offset filter can match), in (partition, offset) order.
    Yields the cold-storage report first, then each window's report. `cold`: None is `source_cold(source)`.
    `planned`: the source's `discover`ed plan (else it is listed here); its ignored objects are logged, those
    with out-of-range names as warnings. With the source's `error_tolerance: skip`, the objects skipped as
    unreadable are put in the plan's `skipped` (key -> error) and logged as warnings. (`ctx.schemas` is for our
    archives: a sink's records are restored as they are.)"""
    s3, log = ctx.s3, ctx.log
    if request.source_topic != source.topic:
        raise InvalidRestore(f"request is for topic {request.source_topic!r}, source {source.name!r} holds "
                             f"{source.topic!r}")
    if request.filters.has_time and not source.has_timestamps:
        stored = (f"fields {list(source.fields)}" if source.layout == "aiven"
                  else "values only" if not source.stores_envelope or source.layout == "confluent" else "")
        raise InvalidRestore(f"source {source.name!r} ({source.layout}, {source.format}, {stored}) stores no record "
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
    yield prepare_cold(s3, source, wanted, cold if cold is not None else source_cold(source), log)
    skipped = p.skipped if source.error_tolerance == "skip" else None
    before = set(skipped or {})
    yield from restore_sources(ctx, request, [window_source(s3, source, fw, skipped) for fw in wanted],
                               hooks=hooks)
    for key in [k for k in skipped or {} if k not in before]:
        log.warning(f"{source.name}: skipped s3://{source.bucket}/{key} (error_tolerance: skip): {skipped[key]}")
