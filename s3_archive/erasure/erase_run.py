"""`erase`: records erased from every committed window of a topic that holds them (docs/compliance.md). The
decisions are erasure/erasure.py's, the objects' reads and rewrites erasure/rewrite.py's, the audit record
erasure/audit.py's; this is the I/O.

Per window, until it commits or holds nothing to erase:
    1. GET the manifest (its bytes and ETag); remove what an erasure left unlisted at or below its generation
       (old objects a killed erasure had not yet deleted).
    2. Read each object in its format, find the matching records; none: the window is left as it is.
    3. Before the run's first rewrite, its audit record, open. PUT each object holding matches again, without them
       (`drop`) or with them nulled (`null`), as `<name>.g<generation+1>-<attempt>` (If-None-Match: *; under a
       retention lock, locked as the window was).
    4. PUT the manifest, generation + 1, with If-Match on the ETag read in 1: a concurrent erasure or re-run that
       changed it meanwhile makes this fail with 412; the objects written in 3 are deleted and the window is done
       again from 1 (nothing is lost).
    5. Delete every object of the window the new manifest does not list at or below its generation (the replaced
       objects, and a killed attempt's orphans), on a versioned bucket every version of them (under a governance
       lock with BypassGovernanceRetention, which `erasure.allow_governance_bypass` allows).

A run killed anywhere leaves each window at one generation: before 4 the old manifest and objects stand (the new
objects are orphans, swept by 5 of the next commit); after 4 the new ones do, and the next run's 1 or 5 deletes
what remains of the old. Once every window has ended, even when some failed (the first failure is raised after),
the run completes its audit record, and those left open by killed runs whose windows it met (erasure/audit.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.archive.driver.commit import window_objects
from s3_archive.archive.integrity import link_to, sha256_hex, window_of_manifest_key
from s3_archive.config.archive import ArchiveConfig
from s3_archive.erasure.audit import Audit
from s3_archive.erasure.erasure import EraseRequest, WindowErasure, check_allowed, next_generation
from s3_archive.erasure.iceberg_erase import TableEraser, TableSession
from s3_archive.erasure.rewrite import Decoded, ObjectFormat, decode, kept_records, matching, rewritten
from s3_archive.io.s3 import NOT_FOUND, PRECONDITION_FAILED, S3Client, error_code, list_objects
from s3_archive.keys.objects import (
    WindowLocation,
    generation_key,
    generation_of_key,
    manifest_prefix,
)
from s3_archive.model.errors import ErasureRefused
from s3_archive.model.manifest import Manifest, ManifestObject, parse_manifest
from s3_archive.model.windows import OffsetWindow

TRIES = 5  # a window redone after a lost If-Match race at most this often
WINDOWS_AT_ONCE = 4


class EraseStep(StrEnum):
    """Where a test's `fault` may stop an erasure of a window."""

    WRITTEN = "written"  # the new objects are PUT; the manifest is not
    COMMITTED = "committed"  # the new manifest is PUT; the replaced objects are not deleted yet


@dataclass(frozen=True)
class EraseHooks:
    """The tests' levers: `fault(step, window)` is called after each step."""

    fault: Callable[[EraseStep, OffsetWindow], None] = lambda step, window: None


@dataclass
class EraseReport:
    topic: str
    dry_run: bool
    windows_read: int = 0
    erased: list[WindowErasure] = field(default_factory=list)
    audit_key: str | None = None
    completed: list[str] = field(default_factory=list)  # open audit records of killed erasures, completed
    expired: dict[str, int] = field(default_factory=dict)  # format iceberg: the files the snapshot expiry deleted

    @property
    def records(self) -> int:
        return sum(w.records for w in self.erased)

    def metadata(self) -> dict[str, Any]:
        return {"topic": self.topic, "dry_run": self.dry_run, "windows_read": self.windows_read,
                "windows_erased": len(self.erased), "records_erased": self.records,
                "audit_record": self.audit_key or "", "audit_records_completed": len(self.completed),
                **{f"iceberg_{k}": v for k, v in self.expired.items()}}


# The hooks `erase` runs with when given none: a test that runs the CLI in a subprocess sets them there.
DEFAULT_HOOKS = EraseHooks()


def erase(s3: S3Client, cfg: ArchiveConfig, request: EraseRequest, dry_run: bool = False,
          hooks: EraseHooks | None = None, table: TableSession | None = None) -> EraseReport:
    """Erase `request`'s records from every committed window of its topic; refused (ErasureRefused) when the
    archive does not allow it. `dry_run`: count what would be erased, write nothing. `table`: the Spark session an
    archive of format iceberg commits to its table through (erasure/iceberg_erase.py; a dry run needs none)."""
    if request.topic not in cfg.topics:
        raise ErasureRefused(f"topic {request.topic!r} is not a topic of archive {cfg.name!r} "
                             f"(its topics: {', '.join(cfg.topics)})")
    check_allowed(cfg)
    keys = sorted(k for o in list_objects(s3, cfg.bucket, manifest_prefix(cfg.prefix, request.topic))
                  if window_of_manifest_key(k := o["Key"]) is not None)
    run = _Eraser(s3, cfg, request, dry_run, hooks or DEFAULT_HOOKS)
    if cfg.format == "iceberg" and not dry_run:
        if table is None:
            raise ErasureRefused(f"archive {cfg.name!r} has format iceberg: its erasure commits to the table "
                                 "through Spark, and none was given")
        run.table = TableEraser(table, s3, cfg, request, run.attempt)
    if not dry_run:
        run.audit.find_open()
    with ThreadPoolExecutor(WINDOWS_AT_ONCE) as pool:
        done = list(pool.map(run.window_or_error, [window_of_manifest_key(k) for k in keys]))
    report = EraseReport(request.topic, dry_run, len(keys), [d for d in done if isinstance(d, WindowErasure)])
    if not dry_run:  # also when some windows failed: what was erased is recorded; a new run goes on with the rest
        report.completed = run.audit.complete(report.erased)
        report.audit_key = run.audit.key if run.audit.opened else None
    failed = [d for d in done if isinstance(d, BaseException)]
    if failed:  # format iceberg: nothing expired (a failed window's manifest may list files its next run reads)
        raise failed[0]
    if run.table is not None and (report.erased or report.completed):
        report.expired = run.table.expire(run.versioned)
    return report


class _Eraser:
    def __init__(self, s3: S3Client, cfg: ArchiveConfig, request: EraseRequest, dry_run: bool,
                 hooks: EraseHooks) -> None:
        self.s3, self.cfg, self.request, self.dry_run, self.hooks = s3, cfg, request, dry_run, hooks
        self.attempt = uuid.uuid4().hex[:12]
        self.bypass = {"BypassGovernanceRetention": True} if cfg.retention_lock is not None else {}
        status = s3.get_bucket_versioning(Bucket=cfg.bucket).get("Status")
        self.versioned = status in ("Enabled", "Suspended")
        self.audit = Audit(s3, cfg, request, self.attempt, self.lock_of(None))
        self.table: TableEraser | None = None  # format iceberg (not a dry run)

    def lock_of(self, m: Manifest | None) -> dict[str, Any]:
        lock = self.cfg.retention_lock
        if m is not None and m.retention is not None:
            return {"ObjectLockMode": m.retention.mode, "ObjectLockRetainUntilDate": m.retention.until}
        if lock is None:
            return {}
        return {"ObjectLockMode": lock.s3_mode,
                "ObjectLockRetainUntilDate": datetime.now(UTC) + timedelta(days=lock.days)}

    def window_or_error(self, w: OffsetWindow) -> WindowErasure | Exception | None:
        try:
            return self.window(w)
        except Exception as e:  # noqa: BLE001 - raised once every window ended and the audit record is written
            return e

    def window(self, w: OffsetWindow) -> WindowErasure | None:
        where = self.cfg.location(self.request.topic, w)
        carried: set[int] = set()  # format iceberg: erased from the table by an attempt that lost the manifest race
        for _ in range(TRIES):
            got = self._read_manifest(where)
            if got is None:
                return None  # gone meanwhile (deleted by hand): nothing to erase
            body, etag, old = got
            gen = old.generation or 1
            if gen > 1 and not self.dry_run:
                self.audit.saw(old.attempt, WindowErasure(w.key, gen, old.erasure_records or 0))
            if not self.dry_run:
                self._sweep(where, old, gen)
            read = self._read(old)
            matched = [(o, d, rows) for o, d, rows in read if rows]
            carried = {o for o in carried if not old.is_erased(o)}
            if not matched and not carried:
                return None
            if self.dry_run:
                return WindowErasure(w.key, gen, sum(len(rows) for _, _, rows in matched))
            self.audit.open_intent()
            objects, dead, erased = self._rewrite(where, old, gen + 1, matched, carried)
            count = len(set(erased))
            self.hooks.fault(EraseStep.WRITTEN, w)
            gone = set(erased)
            kept = kept_records([d for _, d, _ in read], lambda o: o in gone or old.is_erased(o))
            new = next_generation(old, link_to(where.manifest_key, body), objects, dead, erased, self.attempt,
                                  datetime.now(UTC), kept)
            if self.table is not None:  # the snapshot that holds the window's rows now
                new = new.model_copy(update={"iceberg_snapshot_id": self.table.snapshots.get(w.key)})
            try:
                self.s3.put_object(Bucket=where.bucket, Key=where.manifest_key, Body=new.dumps(),
                                   ContentType="application/json", IfMatch=etag, **self.lock_of(old))
            except ClientError as e:
                if error_code(e) not in PRECONDITION_FAILED + ("409", "ConditionalRequestConflict"):
                    raise
                listed = {o.key for o in old.all_objects}  # lost the race: the objects we wrote are orphans
                if self.table is not None:  # the table's data files are Iceberg's: the table keeps our commit
                    carried |= _data_offsets(old, matched)
                    objects = []
                self._purge([o.key for o in [*objects, *dead] if o.key not in listed])
                continue
            self.hooks.fault(EraseStep.COMMITTED, w)
            self._sweep(where, new, gen + 1)
            return WindowErasure(w.key, gen + 1, count)
        raise RuntimeError(f"window {w.key} of {self.request.topic!r}: its manifest changed under every one of "
                           f"{TRIES} erasure attempts; run the erasure again")

    def _read_manifest(self, where: WindowLocation) -> tuple[bytes, str, Manifest] | None:
        try:
            r = self.s3.get_object(Bucket=where.bucket, Key=where.manifest_key)
        except ClientError as e:
            if error_code(e) in NOT_FOUND:
                return None
            raise
        body = r["Body"].read()
        return body, r["ETag"], parse_manifest(body, where.url(where.manifest_key))

    def _sweep(self, where: WindowLocation, m: Manifest, gen: int) -> None:
        """Delete the window's objects `m` does not list whose name is of generation `gen` or lower: replaced
        objects, and orphans of attempts that lost (a newer attempt's objects, of a higher generation, stay)."""
        listed = {o.key for o in m.all_objects}
        found = window_objects(self.s3, where, dead_letters=True)
        stale = [k for k in found if k not in listed and generation_of_key(k, _suffix(k, where)) <= gen]
        self._purge(stale)

    def _purge(self, keys: list[str]) -> None:
        """Delete each key; on a versioned bucket every version of it (a delete marker alone would keep the
        bytes)."""
        for key in keys:
            if not self.versioned:
                self.s3.delete_object(Bucket=self.cfg.bucket, Key=key, **self.bypass)
                continue
            pages = self.s3.get_paginator("list_object_versions").paginate(Bucket=self.cfg.bucket, Prefix=key)
            for page in pages:
                for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                    if v["Key"] == key:
                        self.s3.delete_object(Bucket=self.cfg.bucket, Key=key, VersionId=v["VersionId"],
                                              **self.bypass)

    def _read(self, m: Manifest) -> list[tuple[ManifestObject, Decoded, list[int]]]:
        """Every object of the window: (object, its records as stored, the rows that match)."""
        out = []
        dead = {o.key for o in m.dead_letter_objects}
        for o in m.all_objects:
            data = self.s3.get_object(Bucket=self.cfg.bucket, Key=o.key)["Body"].read()
            decoded = decode(data, o.key, ObjectFormat.of(self.cfg, dead_letter=o.key in dead), self.request)
            out.append((o, decoded, matching(decoded, self.request)))
        return out

    def _rewrite(self, where: WindowLocation, old: Manifest, gen: int, matched: list[tuple[ManifestObject, Decoded,
                 list[int]]], carried: set[int]) -> tuple[list[ManifestObject], list[ManifestObject], list[int]]:
        """The window's data and dead-letter objects of generation `gen` (those holding matches written again, left
        out when no record is left; the others kept), and the offsets erased. Format iceberg: the data objects are
        the table's data files after the window's rows are committed again (erasure/iceberg_erase.py), without
        the matched offsets and those `carried` from an attempt that committed them to the table."""
        replaced = {o.key: (decoded, rows) for o, decoded, rows in matched}
        erased: list[int] = []

        def kept(objects: list[ManifestObject]) -> list[ManifestObject]:
            out = []
            for o in objects:
                if o.key not in replaced:
                    out.append(o)
                    continue
                decoded, rows = replaced[o.key]
                erased.extend(decoded.offsets[i] for i in rows)
                suffix = _suffix(o.key, where)
                data = rewritten(decoded, rows, self.cfg.erasure.mode, generation_key(o.key, suffix, 1))
                if data is not None:
                    out.append(self._put(generation_key(o.key, suffix, gen, self.attempt), data, old))
            return out

        if self.table is not None:
            dead = kept(old.dead_letter_objects)
            in_table = sorted(carried | _data_offsets(old, matched))
            return self.table.erase_window(where.window, in_table), dead, sorted({*erased, *in_table})
        return kept(old.objects), kept(old.dead_letter_objects), erased

    def _put(self, key: str, data: bytes, old: Manifest) -> ManifestObject:
        r = self.s3.put_object(Bucket=self.cfg.bucket, Key=key, Body=data, IfNoneMatch="*", **self.lock_of(old))
        return ManifestObject(key=key, size=len(data), etag=str(r["ETag"]).strip('"'), sha256=sha256_hex(data))


def _data_offsets(old: Manifest, matched: list[tuple[ManifestObject, Decoded, list[int]]]) -> set[int]:
    """The matched offsets of the window's data objects (not of its dead letters)."""
    dead = {o.key for o in old.dead_letter_objects}
    return {d.offsets[i] for o, d, rows in matched if o.key not in dead for i in rows}


def _suffix(key: str, where: WindowLocation) -> str:
    return where.suffix if key.endswith(where.suffix) else ".parquet"
