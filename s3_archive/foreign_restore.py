"""Restore from archives written by Kafka Connect S3 sinks: list the source's objects, get cold ones restored
(S3 RestoreObject), and feed the windows to `restore_sources`, the same exactly-once restore as our archives.

Offsets: a record keeps the offset its object stores (Aiven's `offset` field), else gets its object's start
offset + its position in the object. Either way the same object always gives the same offsets, so the ledger makes
a re-run restore each record exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from s3_archive import cold
from s3_archive.cold import ColdObjectsPending, ColdOptions, ColdReport
from s3_archive.foreign import (
    Decoder, ForeignSource, ForeignWindow, InvalidForeignObject, ListedObject, Plan, decompress, numbered, plan,
    with_keys,
)
from s3_archive.resources import KafkaResource
from s3_archive.restore import (
    ArchivedRecord, Fault, InvalidRestore, RestoreRequest, WindowReport, WindowSource, no_fault, restore_sources,
)

__all__ = ["ColdObjectsPending", "ColdReport", "discover", "list_source", "prepare_cold", "restore_foreign",
           "window_source"]


def list_source(s3: Any, source: ForeignSource) -> list[ListedObject]:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=source.key_prefix):
        for o in page.get("Contents", ()):
            out.append(ListedObject(o["Key"], o["Size"], o.get("StorageClass", "STANDARD")))
    return out


def prepare_cold(s3: Any, source: ForeignSource, windows: list[ForeignWindow], wait_seconds: float, log: Any,
                 poll_seconds: float = 10.0, days: int | None = None, tier: str | None = None) -> ColdReport:
    """`cold.prepare_cold` for the objects of `windows` (storage classes from the listing); `days` and `tier`
    override the source's `cold_restore_days` / `cold_restore_tier`."""
    opts = ColdOptions(wait_seconds, days or source.cold_restore_days, tier or source.cold_restore_tier,
                       poll_seconds)
    return cold.prepare_cold(s3, source.bucket, [o for fw in windows for o in fw.objects], opts,
                             f"{source.name!r} in s3://{source.bucket}/{source.key_prefix}", log)


def _get(s3: Any, bucket: str, o: ListedObject) -> bytes:
    data = s3.get_object(Bucket=bucket, Key=o.key)["Body"].read()
    if len(data) != o.size:
        raise InvalidForeignObject(f"s3://{bucket}/{o.key} is {len(data)} bytes, the listing said {o.size}: it "
                                   "changed while restoring")
    return data


def window_source(s3: Any, source: ForeignSource, fw: ForeignWindow) -> WindowSource:
    decoder = Decoder(source)
    what = f"s3://{source.bucket}/{fw.obj.key}"

    def records() -> Iterator[ArchivedRecord]:
        # One object in memory at a time (sink objects are flush-sized).
        values = decoder.decode(decompress(_get(s3, source.bucket, fw.obj), source.compression), what)
        keys = None
        if fw.keys_obj is not None:
            keys = decoder.decode(decompress(_get(s3, source.bucket, fw.keys_obj), source.compression),
                                  f"s3://{source.bucket}/{fw.keys_obj.key}")
        yield from numbered(with_keys(values, keys, what), fw, what, ArchivedRecord)

    return WindowSource(fw.window, records, open_end=fw.open_end)


def discover(s3: Any, source: ForeignSource) -> Plan:
    return plan(source, list_source(s3, source))


def restore_foreign(kafka: KafkaResource, s3: Any, source: ForeignSource, request: RestoreRequest, log: Any,
                    wait_for_cold_seconds: float = 0.0, fault: Fault = no_fault,
                    cold_poll_seconds: float = 10.0, cold_restore_days: int | None = None,
                    cold_restore_tier: str | None = None) -> Iterator[WindowReport | ColdReport]:
    """Restore every object of `source` (those the offset filter can match), in (partition, offset) order.
    Yields the cold-storage report first, then each window's report."""
    if request.source_topic != source.topic:
        raise InvalidRestore(f"request is for topic {request.source_topic!r}, source {source.name!r} holds "
                             f"{source.topic!r}")
    if request.filters.has_time and not source.has_timestamps:
        raise InvalidRestore(f"source {source.name!r} ({source.layout}, {source.format}, fields "
                             f"{list(source.fields) if source.layout == 'aiven' else ['value']}) stores no record "
                             "timestamps: a time filter cannot be applied. Use from_offset/to_offset")
    p = discover(s3, source)
    if not p.windows:
        raise InvalidForeignObject(
            f"no object of topic {source.topic!r} under s3://{source.bucket}/{source.key_prefix} fits the "
            f"{source.layout} layout" + (f" (template {source.key_template.text!r})" if source.layout == "aiven"
                                        else "") + f"; {len(p.ignored)} other objects there, e.g. "
            f"{p.ignored[:3]}")
    if p.ignored:
        log.info(f"{source.name}: ignoring {len(p.ignored)} objects under the prefix that are not objects of "
                 f"topic {source.topic!r} in this layout, e.g. {p.ignored[:3]}")
    wanted = [fw for fw in p.windows if request.filters.offset_scope(fw.window) is not None]
    yield prepare_cold(s3, source, wanted, wait_for_cold_seconds, log, cold_poll_seconds, cold_restore_days,
                       cold_restore_tier)
    yield from restore_sources(kafka, request, [window_source(s3, source, fw) for fw in wanted], log, fault)
