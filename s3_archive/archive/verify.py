"""`verify`: re-read an archive's committed windows and check them against their manifests (docs/compliance.md).

For each window read: its manifest (hashed, and checked against the link the next manifest recorded), the
manifest's own link to the previous one, the objects under the window's keys listed against the manifest (missing,
resized, added), and each hashed object read and SHA-256'd (changed). The judgements are archive/integrity.py's.

A scheduled run reads at most `verify.bytes_per_run` bytes of objects and goes on where the last one stopped, so
that successive runs re-read every window in turn (the rotation); `full` reads every window. Where the rotation is,
and the newest manifest of each partition with its hash (no later manifest links to it yet, so the next run checks
it did not change or vanish), are kept in the bucket: `<prefix>_verify/<topic>.json`, written with a conditional
PUT (two runs at once: the second one's state is not saved, and the next run reads again what it read).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.archive.health import Verdict
from s3_archive.archive.integrity import (
    Committed,
    Differs,
    Finding,
    Listed,
    head_findings,
    link_findings,
    object_findings,
    rotation,
    sha256_hex,
    window_of_manifest_key,
)
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.s3 import NOT_FOUND, S3Client, error_code, list_objects, put_state, read_bytes, read_state
from s3_archive.keys.objects import manifest_prefix, verify_state_key
from s3_archive.model.errors import InvalidManifest
from s3_archive.model.manifest import Manifest, parse_manifest

READERS = 4  # objects read at once


@dataclass
class VerifyState:
    """What a verify run leaves for the next one (`<prefix>_verify/<topic>.json`)."""

    cursor: str | None = None  # the manifest key of the last window read
    heads: dict[str, dict[str, str]] = field(default_factory=dict)  # partition -> {key, sha256} of its newest
    pass_started: str | None = None  # when the rotation's current pass began
    last_pass_completed: str | None = None

    @classmethod
    def parse(cls, body: bytes | None) -> VerifyState:
        if not body:
            return cls()
        try:
            data = json.loads(body)
            return cls(data.get("cursor"), dict(data.get("heads") or {}), data.get("pass_started"),
                       data.get("last_pass_completed"))
        except (ValueError, AttributeError, TypeError):
            return cls()  # unreadable: start the rotation again (the heads are then not compared)

    def dumps(self) -> bytes:
        return json.dumps(self.__dict__, indent=1, sort_keys=True).encode()


@dataclass(frozen=True)
class VerifyReport:
    topic: str
    bucket: str
    windows: int  # the topic's committed windows (manifests listed)
    read: list[str]  # the windows read this run, in order
    bytes_read: int  # of objects
    seconds: float
    findings: list[Finding]
    completed_pass: bool  # this run reached the end of a pass over every window
    runs_per_pass: int | None  # runs a pass over every window takes at this run's pace; None: nothing read
    state_key: str

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.failure]

    @property
    def unhashed_windows(self) -> list[str]:
        return sorted({f.window for f in self.findings if f.differs == Differs.UNHASHED})

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0


class _Manifests:
    """The topic's manifests: listed once, read at most once each (their bytes hashed as committed)."""

    def __init__(self, s3: S3Client, cfg: ArchiveConfig, topic: str) -> None:
        self.s3, self.bucket = s3, cfg.bucket
        self.keys = [o["Key"] for o in list_objects(s3, cfg.bucket, manifest_prefix(cfg.prefix, topic))
                     if window_of_manifest_key(o["Key"]) is not None]
        self.listed = set(self.keys)
        self._first: dict[int, int] = {}  # partition -> the start of its oldest listed window
        for k in self.keys:
            w = window_of_manifest_key(k)
            if w is not None:
                self._first[w.partition] = min(w.start, self._first.get(w.partition, w.start))
        self._read: dict[str, Committed | None] = {}

    def get(self, key: str) -> Committed | None:
        if key not in self._read:
            body = read_bytes(self.s3, self.bucket, key)
            if body is None:
                self._read[key] = None
            else:
                try:
                    m: Manifest | None = parse_manifest(body, f"s3://{self.bucket}/{key}")
                except InvalidManifest:
                    m = None
                self._read[key] = Committed(key, sha256_hex(body), m)
        return self._read[key]

    def older_than(self, key: str) -> bool:
        """Whether the partition of manifest `key` has a listed manifest of an earlier window."""
        w = window_of_manifest_key(key)
        return w is not None and self._first.get(w.partition, w.start) < w.start

    def newest(self) -> dict[str, str]:
        """Each partition's newest manifest key."""
        out: dict[str, tuple[int, str]] = {}
        for k in self.keys:
            w = window_of_manifest_key(k)
            if w is not None and (str(w.partition) not in out or w.start > out[str(w.partition)][0]):
                out[str(w.partition)] = (w.start, k)
        return {p: k for p, (_, k) in out.items()}


def _hash_object(s3: S3Client, bucket: str, key: str) -> str | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    except ClientError as e:
        if error_code(e) in NOT_FOUND:
            return None
        raise
    h = hashlib.sha256()
    while chunk := body.read(1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _listed(s3: S3Client, cfg: ArchiveConfig, topic: str, m: Manifest) -> dict[str, Listed]:
    """Every object whose key belongs to the window (data, and dead letters), as the bucket lists it. Format
    iceberg: the table's data files are Iceberg's, named by Iceberg in its warehouse, so each one the manifest lists
    is looked at (HEAD) instead; nothing else there belongs to the window."""
    where = cfg.location(topic, m.window)
    entries = list(list_objects(s3, cfg.bucket, where.dead_letter_stem))
    if m.iceberg_table is None:
        entries += [o for o in list_objects(s3, cfg.bucket, where.scan_prefix) if where.owns(o["Key"])]
    else:
        entries += [h for o in m.objects if (h := _head(s3, cfg.bucket, o.key)) is not None]
    return {o["Key"]: Listed(o["Key"], int(o["Size"]), str(o.get("ETag", "")).strip('"')) for o in entries}


def _head(s3: S3Client, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        h = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if error_code(e) in NOT_FOUND:
            return None
        raise
    return {"Key": key, "Size": h["ContentLength"], "ETag": h.get("ETag", "")}


def _window_findings(s3: S3Client, cfg: ArchiveConfig, topic: str, found: _Manifests, key: str,
                     pool: ThreadPoolExecutor) -> tuple[list[Finding], int]:
    """One window: its manifest's link, its objects. Returns the findings and the bytes of objects read."""
    w = window_of_manifest_key(key)
    assert w is not None
    committed = found.get(key)
    if committed is None:
        return [Finding(w.key, Differs.MANIFEST_MISSING, key, "listed, but gone when read")], 0
    m = committed.manifest
    if m is None:
        return [Finding(w.key, Differs.MANIFEST_INVALID, key, "does not parse as a manifest")], 0
    out: list[Finding] = []
    if m.previous_manifest is not None:
        link = m.previous_manifest.key
        target = found.get(link) if link in found.listed else None
        out += link_findings(m, target, found.older_than(link))
    listed = _listed(s3, cfg, topic, m)
    hashed = [o for o in m.all_objects if o.sha256 and o.key in listed and listed[o.key].size == o.size]
    digests = dict(zip((o.key for o in hashed), pool.map(lambda o: _hash_object(s3, cfg.bucket, o.key), hashed),
                       strict=True))
    out += object_findings(m, listed, {k: v for k, v in digests.items() if v is not None})
    return out, sum(o.size for o in hashed)


def verify_topic(s3: S3Client, cfg: ArchiveConfig, topic: str, full: bool = False,
                 progress: Callable[[str], Any] | None = None) -> VerifyReport:
    """Verify the topic's windows: every one (`full`), or the next ones of the rotation within
    `cfg.verify.bytes_per_run`. The rotation's state is saved either way."""
    began, now = time.monotonic(), datetime.now(UTC).isoformat()
    state_key = verify_state_key(cfg.prefix, topic)
    body, etag = read_state(s3, cfg.bucket, state_key)
    state = VerifyState.parse(body)
    found = _Manifests(s3, cfg, topic)
    findings: list[Finding] = []
    for _, head in sorted(state.heads.items()):
        findings += head_findings(head["key"], head["sha256"], found.get(head["key"]) if head["key"]
                                  in found.listed else None)
    order = sorted(found.keys) if full else rotation(found.keys, state.cursor)
    budget = math.inf if full else cfg.verify.bytes_per_run
    read: list[str] = []
    spent = 0
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for key in order:
            if spent >= budget:
                break
            more, n = _window_findings(s3, cfg, topic, found, key, pool)
            findings += more
            spent += n
            read.append(key)
            if progress is not None:
                progress(key)
    # A pass ends with the last window in key order; the rotation then starts again from the first.
    completed = bool(order) and max(order) in read
    if state.pass_started is None:
        state.pass_started = now
    if completed:
        state.last_pass_completed, state.pass_started = now, None
    if not full and read:
        state.cursor = read[-1]
    state.heads = {p: {"key": k, "sha256": c.sha256} for p, k in found.newest().items()
                   if (c := found.get(k)) is not None}
    put_state(s3, cfg.bucket, state_key, state.dumps(), etag)
    runs = math.ceil(len(found.keys) / len(read)) if read else None  # at this run's pace
    windows = [w.key for k in read if (w := window_of_manifest_key(k)) is not None]
    return VerifyReport(topic, cfg.bucket, len(found.keys), windows, spent, time.monotonic() - began, findings,
                        completed, runs, state_key)


def verify_verdict(report: VerifyReport, cfg: ArchiveConfig) -> Verdict:
    """The `verify` check's answer: each finding that fails it (naming the window, the object and what differs);
    else, a WARN when at this budget a pass over every window takes longer than `verify.period_days` (the check
    runs daily)."""
    problems = [f.text(report.bucket) for f in report.failures]
    slow = report.runs_per_pass is not None and report.runs_per_pass > cfg.verify.period_days
    meta = {"windows_read": len(report.read), "windows": report.windows, "bytes_read": report.bytes_read,
            "mb_per_s": round(report.mb_per_s, 2), "unhashed_windows": len(report.unhashed_windows),
            "runs_per_pass": report.runs_per_pass, "completed_pass": report.completed_pass,
            "findings": [f"{f.window} {f.differs} {f.key}" for f in report.findings[:50]],
            "state": f"s3://{report.bucket}/{report.state_key}"}
    if not problems and slow:
        return Verdict([f"at verify.bytes_per_run {cfg.verify.bytes_per_run} a pass over the {report.windows} windows "
                        f"takes about {report.runs_per_pass} daily runs, more than verify.period_days "
                        f"{cfg.verify.period_days:g}: raise bytes_per_run"], "", meta, warn=True)
    ok = (f"{len(report.read)} of {report.windows} window(s) re-read ({report.bytes_read} bytes): every object "
          "hash, size and key and every manifest link as committed"
          + (f"; {len(report.unhashed_windows)} unhashed window(s) checked by size and ETag"
             if report.unhashed_windows else ""))
    return Verdict(problems, ok, meta)
