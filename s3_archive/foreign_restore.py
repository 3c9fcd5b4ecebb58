"""Restore from archives written by Kafka Connect S3 sinks: list the source's objects, get cold ones restored
(S3 RestoreObject), and feed the windows to `restore_sources`, the same exactly-once restore as our archives.

Offsets: a record keeps the offset its object stores (Aiven's `offset` field), else gets its object's start
offset + its position in the object. Either way the same object always gives the same offsets, so the ledger makes
a re-run restore each record exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.foreign import (
    COLD_CLASSES, Decoder, ForeignSource, ForeignWindow, InvalidForeignObject, ListedObject, Plan, cold_state,
    decompress, numbered, plan, with_keys,
)
from s3_archive.resources import KafkaResource
from s3_archive.restore import (
    ArchivedRecord, Fault, InvalidRestore, RestoreRequest, WindowReport, WindowSource, no_fault, restore_sources,
)


class ColdObjectsPending(RuntimeError):
    """Objects in GLACIER / DEEP_ARCHIVE are not readable yet; their restore was requested."""


def list_source(s3: Any, source: ForeignSource) -> list[ListedObject]:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=source.key_prefix):
        for o in page.get("Contents", ()):
            out.append(ListedObject(o["Key"], o["Size"], o.get("StorageClass", "STANDARD")))
    return out


@dataclass
class ColdReport:
    cold: int = 0  # objects in GLACIER / DEEP_ARCHIVE among those to read
    requested: int = 0  # RestoreObject sent by this run
    pending: int = 0  # still being restored when the run gave up or went on


def prepare_cold(s3: Any, source: ForeignSource, windows: list[ForeignWindow], wait_seconds: float, log: Any,
                 poll_seconds: float = 10.0) -> ColdReport:
    """Before anything is produced: request a restore of every cold object not yet requested, then fail with the
    count of objects still being restored (`wait_seconds` 0), or poll until they are readable, for at most
    `wait_seconds`."""
    cold = [o for fw in windows for o in fw.objects if o.storage_class in COLD_CLASSES]
    rep = ColdReport(cold=len(cold))
    if not cold:
        return rep

    for o in cold:
        if _cold_state(s3, source, o) == "request":
            try:
                s3.restore_object(Bucket=source.bucket, Key=o.key,
                                  RestoreRequest={"Days": source.cold_restore_days,
                                                  "GlacierJobParameters": {"Tier": source.cold_restore_tier}})
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != "RestoreAlreadyInProgress":
                    raise
            rep.requested += 1
    log.info(f"{source.name}: {len(cold)} objects are in GLACIER/DEEP_ARCHIVE; restore requested now for "
             f"{rep.requested} ({source.cold_restore_tier} tier, {source.cold_restore_days} days)")
    deadline = time.monotonic() + wait_seconds
    while True:
        pending = [o.key for o in cold if _cold_state(s3, source, o) != "ready"]
        rep.pending = len(pending)
        if not pending:
            return rep
        if time.monotonic() >= deadline:
            waited = f" after waiting {wait_seconds:g} s" if wait_seconds > 0 else ""
            raise ColdObjectsPending(
                f"{len(pending)} of {len(cold)} objects of {source.name!r} in s3://{source.bucket}/"
                f"{source.key_prefix} are still being restored from GLACIER/DEEP_ARCHIVE{waited} (restore "
                f"requested by this run: {rep.requested}; e.g. {pending[0]}). Nothing was produced. Run again once "
                "they are restored (Standard tier: hours; DEEP_ARCHIVE: up to 48 h), or launch with "
                "wait_for_cold_seconds")
        log.info(f"{source.name}: waiting for {len(pending)} objects to be restored from cold storage")
        time.sleep(max(0.0, min(poll_seconds, deadline - time.monotonic())))


def _cold_state(s3: Any, source: ForeignSource, o: ListedObject) -> str:
    return cold_state(o.storage_class, s3.head_object(Bucket=source.bucket, Key=o.key).get("Restore"))


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
                    cold_poll_seconds: float = 10.0) -> Iterator[WindowReport | ColdReport]:
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
    yield prepare_cold(s3, source, wanted, wait_for_cold_seconds, log, cold_poll_seconds)
    yield from restore_sources(kafka, request, [window_source(s3, source, fw) for fw in wanted], log, fault)
