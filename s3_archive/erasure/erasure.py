"""Erasure on request, pure (docs/compliance.md): what an erasure request is, which records of a window it matches,
whether the archive allows it (`refusal`), the window's next manifest generation, and the audit record. The reads
and rewrites of objects are erasure/rewrite.py's, the commits erasure/erase_run.py's.

A request names records by their key (one or several, as bytes) or by a field decoded from their value
(`value_decoding`: a column of the window's objects) equal to a value. The new manifest lists the erased offsets,
never the key; the audit record keeps only a salted SHA-256 of each key (or of the field's value).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.model.errors import ErasureRefused
from s3_archive.model.formats import FORMATS
from s3_archive.model.manifest import Manifest, ManifestLink, ManifestObject, iso

# Read and written again in their own format by the archive's encoders (erasure/rewrite.py); iceberg's windows are
# committed again to the table (erasure/iceberg_erase.py). text and bytes keep no key and no offset: nothing says
# which of their records is whose.
ERASABLE_FORMATS = ("parquet", "avro", "jsonl", "json", "csv", "iceberg")


@dataclass(frozen=True)
class FieldEquals:
    """Records whose decoded column `field` equals `equals`."""

    field: str
    equals: str | int | float | bool


@dataclass(frozen=True)
class EraseRequest:
    """What to erase from one topic: records with one of `keys`, or those `predicate` matches (exactly one)."""

    topic: str
    keys: tuple[bytes, ...] = ()
    predicate: FieldEquals | None = None

    def __post_init__(self) -> None:
        if bool(self.keys) == (self.predicate is not None):
            raise ErasureRefused(f"an erasure of topic {self.topic!r} names records by key (one or more) or by a "
                                 f"predicate on a decoded field, exactly one of the two; got "
                                 f"{len(self.keys)} key(s) and {'a' if self.predicate else 'no'} predicate")

    @property
    def subjects(self) -> list[bytes]:
        """What the audit record hashes: each key, or the predicate's field and value."""
        if self.predicate is None:
            return list(self.keys)
        return [f"{self.predicate.field}={json.dumps(self.predicate.equals)}".encode()]

    def columns(self) -> list[str]:
        """The columns of a window's objects a match reads."""
        return ["offset", "key"] if self.predicate is None else ["offset", self.predicate.field]

    def matching(self, columns: dict[str, Sequence[Any]]) -> list[int]:
        """The row numbers that match, given the columns `columns()` names (as Python lists)."""
        if self.predicate is None:
            keys = set(self.keys)
            return [i for i, k in enumerate(columns["key"]) if k is not None and bytes(k) in keys]
        want = self.predicate.equals
        return [i for i, v in enumerate(columns[self.predicate.field])
                if v is not None and type(v) is type(want) and v == want]


KEY_ENCODINGS = ("utf8", "hex", "base64")


def parse_key(text: str, encoding: str) -> bytes:
    """A key as a user gives it: UTF-8 text, hexadecimal (two digits per byte) or base64 (standard alphabet, padded),
    for keys that are not text. Refused naming the value and what is allowed."""
    if encoding == "utf8":
        return text.encode()
    try:
        if encoding == "hex":
            return bytes.fromhex(text)
        if encoding == "base64":
            return base64.b64decode(text, validate=True)
    except ValueError:
        allowed = ("hexadecimal digits, two per byte (e.g. 00ff10)" if encoding == "hex"
                   else "base64 of the standard alphabet A-Z a-z 0-9 + /, padded with = (e.g. AP8Q)")
        raise ErasureRefused(f"key {text!r} is not {encoding}: a {encoding} key is {allowed}") from None
    raise ErasureRefused(f"key encoding {encoding!r} is not one of {', '.join(KEY_ENCODINGS)}")


def parse_equals(text: str) -> str | int | float | bool:
    """A predicate's value as a user types it: JSON when it is a JSON scalar (42, true, "text"), else the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, str | int | float | bool) else text


def refusal(cfg: ArchiveConfig, with_bypass_permission: bool = True) -> str | None:
    """Why erasure cannot run on this archive (None: it can). A compliance lock cannot be lifted by anyone before
    its date; a governance lock needs `erasure.allow_governance_bypass` (and s3:BypassGovernanceRetention)."""
    lock = cfg.retention_lock
    if lock is not None and lock.mode == "compliance":
        return (f"archive {cfg.name!r} has retention_lock mode compliance ({lock.days} days): nobody, not even the "
                "bucket's root account, can delete or replace a locked object before its retain-until date, so "
                "records cannot be erased from a window until its lock expires")
    if lock is not None and not cfg.erasure.allow_governance_bypass:
        return (f"archive {cfg.name!r} has retention_lock mode governance: replacing a window's objects deletes "
                "locked objects, which needs `erasure.allow_governance_bypass: true` in the archive's config and "
                "the s3:BypassGovernanceRetention permission")
    if lock is not None and not with_bypass_permission:
        return (f"archive {cfg.name!r} has retention_lock mode governance and allows the bypass, but the credentials "
                "lack s3:BypassGovernanceRetention")
    if cfg.format not in ERASABLE_FORMATS:
        return (f"archive {cfg.name!r} has format {cfg.format!r}, which stores {FORMATS[cfg.format].stores}: no key "
                "and no offset, so no record of its objects can be found by key or named by offset; erasure rewrites "
                f"formats {', '.join(ERASABLE_FORMATS)}")
    if cfg.format == "csv" and "offset" not in cfg.csv_fields:
        return (f"archive {cfg.name!r} has format csv with csv_fields {cfg.csv_fields}: without 'offset' no line "
                "can be named by its offset")
    return None


def check_allowed(cfg: ArchiveConfig) -> None:
    if (why := refusal(cfg)) is not None:
        raise ErasureRefused(f"erasure refused: {why}")


def offset_ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Offsets as sorted `[from, to)` ranges, adjacent ones joined."""
    out: list[list[int]] = []
    for o in sorted(set(offsets)):
        if out and out[-1][1] == o:
            out[-1][1] = o + 1
        else:
            out.append([o, o + 1])
    return out


def merged_ranges(a: Iterable[Sequence[int]], b: Iterable[Sequence[int]]) -> list[list[int]]:
    """Two range lists as one (sorted, overlapping and adjacent ranges joined)."""
    out: list[list[int]] = []
    for lo, hi in sorted([list(r) for r in [*a, *b]]):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def bounds(kept: list[tuple[int, int | None]]) -> dict[str, Any]:
    """The manifest's offset and timestamp bounds over the records a window keeps ((offset, timestamp ms) each)."""
    offsets = [o for o, _ in kept]
    times = [t for _, t in kept if t is not None]
    lo, hi = (min(times), max(times)) if times else (None, None)
    return {"first_offset": min(offsets, default=None), "last_offset": max(offsets, default=None),
            "min_timestamp_ms": lo, "max_timestamp_ms": hi, "min_timestamp": iso(lo), "max_timestamp": iso(hi)}


def next_generation(old: Manifest, old_link: ManifestLink, objects: list[ManifestObject],
                    dead_letters: list[ManifestObject], erased: list[int], attempt: str, now: datetime,
                    kept: list[tuple[int, int | None]] | None = None) -> Manifest:
    """The window's manifest after an erasure: generation + 1, the new objects, the erased offsets added to those
    of earlier generations, `supersedes` naming the manifest it replaces (and those that one replaced); the link
    to the previous manifest of the partition stays. `record_count` no longer counts the erased records (in mode
    `null` the objects still hold them, nulled). `kept`: the records left ((offset, timestamp ms) each), whose
    bounds become the manifest's first/last offsets and min/max timestamps (None: the old bounds stay, as bounds)."""
    return old.model_copy(update={**(bounds(kept) if kept is not None else {}),
        "generation": (old.generation or 1) + 1,
        "supersedes": [*old.supersedes, old_link],
        "erased_offsets": merged_ranges(old.erased_offsets, offset_ranges(erased)),
        "erasure_records": len(set(erased)),
        "objects": sorted(objects, key=lambda o: o.key),
        "dead_letter_objects": sorted(dead_letters, key=lambda o: o.key),
        "bytes_written": sum(o.size for o in objects),
        "record_count": old.record_count - len(erased),
        "attempt": attempt,
        "committed_at": now.isoformat(),
    })


def salted_hash(salt: bytes, subject: bytes) -> str:
    """What the audit record keeps of a key: SHA-256 of the archive's salt and the key (no dictionary of likely keys
    reverses it without the salt, which stays in the bucket)."""
    return hashlib.sha256(salt + subject).hexdigest()


@dataclass(frozen=True)
class WindowErasure:
    """One window's part of an erasure: the window, the generation it committed, how many records it erased."""

    window: str
    generation: int
    records: int


def intent_record(request: EraseRequest, salt: bytes, mode: str, started: datetime, erasure_id: str) -> bytes:
    """The audit record as an erasure writes it before it rewrites anything (`state: open`): when, the request's
    salted hashes and the mode. The run completes it at its end (`audit_record`); a later run completes it if the
    run was killed first (`completed_intent`)."""
    return _json({"erasure_id": erasure_id, "topic": request.topic, "state": "open", "started_at": started.isoformat(),
                  "mode": mode, "matched_by": _matched_by(request),
                  "subject_sha256": [salted_hash(salt, s) for s in request.subjects]})


def audit_record(request: EraseRequest, salt: bytes, windows: list[WindowErasure], mode: str, started: datetime,
                 when: datetime, erasure_id: str) -> bytes:
    """The audit record of one erasure, complete: when, how many records, which windows, the salted hashes."""
    intent = json.loads(intent_record(request, salt, mode, started, erasure_id))
    return _json(_completed(intent, windows, when))


def completed_intent(intent: dict[str, Any], windows: list[WindowErasure], when: datetime, by: str) -> bytes:
    """The open audit record of an erasure killed before its end, completed by erasure `by`: the windows whose
    manifests it committed (their `attempt` is its id), each with the records it erased."""
    return _json({**_completed(intent, windows, when), "completed_by": by})


def _completed(intent: dict[str, Any], windows: list[WindowErasure], when: datetime) -> dict[str, Any]:
    return {**intent, "state": "complete", "erased_at": when.isoformat(), "records": sum(w.records for w in windows),
            "windows": [{"window": w.window, "generation": w.generation, "records": w.records}
                        for w in sorted(windows, key=lambda w: w.window)]}


def _matched_by(request: EraseRequest) -> str:
    return "key" if request.predicate is None else f"field {request.predicate.field}"


def _json(record: dict[str, Any]) -> bytes:
    return json.dumps(record, indent=1, sort_keys=True).encode()
