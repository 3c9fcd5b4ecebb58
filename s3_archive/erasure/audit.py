"""An erasure's audit record in the bucket (docs/compliance.md, "The audit record"): the archive's salt, the record
opened before the first rewrite and completed at the end, and the open records of erasures killed before their end,
which the next erasure of the topic completes. The records' contents are erasure/erasure.py's.

`<prefix>_erasure/<topic>/<start time>-<erasure id>.json`. Opened with If-None-Match: *; completed by its own run with
a plain PUT (what the run itself erased is authoritative), by another run with If-Match on the ETag it read (the
erasure that opened it, still running, completes it itself: a later run's completion then loses, never the owner's).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.config.archive import ArchiveConfig
from s3_archive.erasure.erasure import (
    EraseRequest,
    WindowErasure,
    audit_record,
    completed_intent,
    intent_record,
)
from s3_archive.io.s3 import NOT_FOUND, PRECONDITION_FAILED, S3Client, error_code, list_objects
from s3_archive.keys.objects import erasure_audit_key, erasure_salt_key


def salt(s3: S3Client, cfg: ArchiveConfig) -> bytes:
    """The archive's salt for the audit records' hashes, made once (If-None-Match: *) and kept in the bucket."""
    key = erasure_salt_key(cfg.prefix)
    for _ in range(3):
        try:
            return s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read()
        except ClientError as e:
            if error_code(e) not in NOT_FOUND:
                raise
        try:
            s3.put_object(Bucket=cfg.bucket, Key=key, Body=os.urandom(32), IfNoneMatch="*")
        except ClientError as e:
            if error_code(e) not in PRECONDITION_FAILED:
                raise
    raise RuntimeError(f"s3://{cfg.bucket}/{key}: the erasure salt could not be read or made")


@dataclass
class OpenIntent:
    """An audit record left open by an erasure that did not end: its key, ETag and contents, and the windows found
    committed by it (their manifest's `attempt` is its id)."""

    key: str
    etag: str
    record: dict[str, Any]
    windows: list[WindowErasure] = field(default_factory=list)


class Audit:
    """One erasure run's audit record, and the open ones of earlier runs it completes."""

    def __init__(self, s3: S3Client, cfg: ArchiveConfig, request: EraseRequest, erasure_id: str,
                 lock: dict[str, Any]) -> None:
        self.s3, self.cfg, self.request, self.id, self.lock = s3, cfg, request, erasure_id, lock
        self.started = datetime.now(UTC)
        self.key = erasure_audit_key(cfg.prefix, request.topic, f"{self.started.strftime('%Y%m%dT%H%M%SZ')}-{self.id}")
        self.opened = False
        self._guard = threading.Lock()
        self.open: dict[str, OpenIntent] = {}

    def find_open(self) -> None:
        """The topic's audit records still open (their erasures were killed, or still run)."""
        prefix = erasure_audit_key(self.cfg.prefix, self.request.topic, "")[:-len(".json")]
        for o in list_objects(self.s3, self.cfg.bucket, prefix):
            if not o["Key"].endswith(".json"):
                continue
            r = self.s3.get_object(Bucket=self.cfg.bucket, Key=o["Key"])
            record = json.loads(r["Body"].read())
            if record.get("state") == "open" and record.get("erasure_id") != self.id:
                self.open[record["erasure_id"]] = OpenIntent(o["Key"], r["ETag"], record)

    def saw(self, erasure_id: str, window: WindowErasure) -> None:
        """A window committed by the erasure `erasure_id`: named in its record if that one is open."""
        with self._guard:
            intent = self.open.get(erasure_id)
            if intent is not None and all(w.window != window.window for w in intent.windows):
                intent.windows.append(window)

    def open_intent(self) -> None:
        """Before the run's first rewrite: its record, open (once)."""
        with self._guard:
            if self.opened:
                return
            body = intent_record(self.request, salt(self.s3, self.cfg), self.cfg.erasure.mode, self.started, self.id)
            self.s3.put_object(Bucket=self.cfg.bucket, Key=self.key, Body=body, ContentType="application/json",
                               IfNoneMatch="*", **self.lock)
            self.opened = True

    def complete(self, windows: list[WindowErasure]) -> list[str]:
        """The run's record completed (when it opened one), and every open record of an earlier run completed with
        the windows found committed by it; the keys of the records completed for others."""
        now = datetime.now(UTC)
        if self.opened:
            body = audit_record(self.request, salt(self.s3, self.cfg), windows, self.cfg.erasure.mode, self.started,
                                now, self.id)
            self.s3.put_object(Bucket=self.cfg.bucket, Key=self.key, Body=body, ContentType="application/json",
                               **self.lock)
        done = []
        for intent in self.open.values():
            try:
                self.s3.put_object(Bucket=self.cfg.bucket, Key=intent.key, IfMatch=intent.etag,
                                   Body=completed_intent(intent.record, intent.windows, now, self.id),
                                   ContentType="application/json", **self.lock)
            except ClientError as e:
                if error_code(e) not in PRECONDITION_FAILED + ("409", "ConditionalRequestConflict"):
                    raise
                continue  # its own run completed it meanwhile
            done.append(intent.key)
        return done
