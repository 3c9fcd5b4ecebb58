"""The restore drill, pure (docs/compliance.md): when a drill is due, which windows it restores (a rotation within a
byte budget), the record-by-record comparison of what came back with the archive, and the drill's verdict texts and
metadata. The run is restore/drill.py's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from s3_archive.model.windows import OffsetWindow

SCRATCH_PREFIX = "s3-archive-drill-"
_TOPIC_MAX = 249
_SHOWN = 24  # bytes of a differing field shown in a finding


@dataclass
class DrillState:
    """What a drill leaves for the next one (`<prefix>_drill/<topic>.json`)."""

    cursor: str | None = None  # the key of the last window drilled
    last_drill: str | None = None  # when the last drill ran (ISO-8601, UTC)
    last_passed: bool | None = None

    @classmethod
    def parse(cls, body: bytes | None) -> DrillState:
        if not body:
            return cls()
        try:
            data = json.loads(body)
            return cls(data.get("cursor"), data.get("last_drill"), data.get("last_passed"))
        except (ValueError, AttributeError, TypeError):
            return cls()  # unreadable: the next drill is due and starts the rotation again

    def dumps(self) -> bytes:
        return json.dumps(self.__dict__, indent=1, sort_keys=True).encode()

    def next_due(self, every_days: int) -> datetime | None:
        """When the next drill is due; None: now (no drill yet, the last one failed, or the state is unreadable)."""
        if self.last_drill is None or not self.last_passed:
            return None
        try:
            last = datetime.fromisoformat(self.last_drill)
        except ValueError:
            return None
        # An hour early counts: the daily schedule's run starts a little later or earlier from day to day.
        return last + timedelta(days=every_days) - timedelta(hours=1)

    def due(self, now: datetime, every_days: int) -> bool:
        when = self.next_due(every_days)
        return when is None or now >= when


class Sample(NamedTuple):
    windows: list[OffsetWindow]  # in (partition, start) order, as a restore runs them
    cursor: str | None  # the key of the last window taken in rotation order (where the next drill goes on)


def sample(windows: Iterable[OffsetWindow], cursor: str | None, size: Callable[[OffsetWindow], int],
           budget: int) -> Sample:
    """The windows a drill restores: in (partition, start) order from the one after `cursor` (the last window the
    previous drill restored), wrapping round to the first, until their objects (`size`, asked window by window as
    the sample grows) reach `budget` bytes; at least one window, each at most once."""
    ordered = sorted(set(windows))
    if cursor is not None:  # window keys are zero-padded: their order is (partition, start)'s
        ordered = [w for w in ordered if w.key > cursor] + [w for w in ordered if w.key <= cursor]
    out: list[OffsetWindow] = []
    spent = 0
    for w in ordered:
        out.append(w)
        spent += size(w)
        if spent >= budget:
            break
    return Sample(sorted(out), out[-1].key if out else cursor)


def scratch_topic_name(topic: str, now: datetime) -> str:
    """The topic a drill creates and deletes: the product's prefix, the archived topic, the time (so a drill that
    was killed before it deleted its topic leaves a name nothing else uses, and the next drill knows it)."""
    return f"{_scratch_stem(topic)}{now.strftime(_STAMP)}"


_STAMP = "%Y%m%dT%H%M%S"


def _scratch_stem(topic: str) -> str:
    room = _TOPIC_MAX - len(SCRATCH_PREFIX) - len("20260101T000000") - 1
    return f"{SCRATCH_PREFIX}{topic[:room]}-"


def stale_scratch_topics(names: Iterable[str], topic: str, now: datetime,
                         age: timedelta = timedelta(days=1)) -> list[str]:
    """The scratch topics of `topic`'s drills among `names` made more than `age` before `now`: left by a drill that
    was killed before it deleted its topic (a younger one may be another drill's, still running)."""
    stem, out = _scratch_stem(topic), []
    for name in names:
        if not name.startswith(stem) or not re.fullmatch(r"\d{8}T\d{6}", name[len(stem):]):
            continue
        made = datetime.strptime(name[len(stem):], _STAMP).replace(tzinfo=now.tzinfo)
        if now - made > age:
            out.append(name)
    return sorted(out)


class Archived(NamedTuple):
    """A record as the archive holds it, with the window it is in."""

    window: OffsetWindow
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int


class Restored(NamedTuple):
    """A record as the drill read it back from the scratch topic."""

    offset: int  # in the scratch topic
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int


@dataclass(frozen=True)
class Mismatch:
    """The first record of a source partition that did not come back as archived."""

    window: OffsetWindow
    offset: int | None  # the source offset of the archived record (None: an extra restored record)
    what: str

    def text(self) -> str:
        at = f"record at offset {self.offset}" if self.offset is not None else "after its last record"
        return f"window {self.window.key}: {at}: {self.what}"


def _shown(v: bytes | None) -> str:
    if v is None:
        return "null"
    more = "…" if len(v) > _SHOWN else ""
    return f"{len(v)} bytes {v[:_SHOWN].hex()}{more}"


def _differs(a: Archived, r: Restored) -> str | None:
    """Which part of the record differs, shown both ways; None when key, value, headers and timestamp are equal. A
    timestamp <= 0 is not compared: the producer stamps those with its own time (the restore counts them)."""
    for name in ("key", "value"):
        x, y = getattr(a, name), getattr(r, name)
        if x != y:
            return f"{name} differs: archived {_shown(x)}, restored {_shown(y)}"
    if list(a.headers) != list(r.headers):
        return f"headers differ: archived {_headers(a.headers)}, restored {_headers(r.headers)}"
    if a.timestamp_ms > 0 and a.timestamp_ms != r.timestamp_ms:
        return f"timestamp differs: archived {a.timestamp_ms}, restored {r.timestamp_ms}"
    return None


def _headers(h: list[tuple[str, bytes | None]]) -> str:
    return "[" + ", ".join(f"{k}={_shown(v)}" for k, v in h[:5]) + (", …" if len(h) > 5 else "") + "]"


def first_mismatch(archived: Iterable[Archived], restored: Iterator[Restored]) -> tuple[Mismatch | None, int]:
    """Compare one source partition's archived records (its sampled windows in order) with what its scratch
    partition holds, in order. Returns the first mismatch (None: every record came back byte for byte and in
    order, and nothing else) and the records compared."""
    n = 0
    last: Archived | None = None
    for a in archived:
        r = next(restored, None)
        if r is None:
            return Mismatch(a.window, a.offset, "missing from the scratch topic (it holds "
                                                f"{n} records of this partition before it)"), n
        what = _differs(a, r)
        if what is not None:
            return Mismatch(a.window, a.offset, f"{what} (scratch offset {r.offset})"), n
        n += 1
        last = a
    extra = next(restored, None)
    if extra is not None and last is not None:
        return Mismatch(last.window, None, f"the scratch topic holds a record more, at scratch offset "
                                           f"{extra.offset} ({_shown(extra.value)})"), n
    return None, n


@dataclass
class DrillReport:
    """What a drill found and measured (or, when none was due, when the next one is)."""

    topic: str
    bucket: str
    windows: int  # the topic's committed windows
    drilled: list[str] = field(default_factory=list)  # the window keys restored and compared
    scratch_topic: str | None = None
    object_bytes: int = 0  # of the sample's objects (what the budget counts)
    record_bytes: int = 0  # key + value + header bytes restored
    records: int = 0  # restored
    compared: int = 0  # records compared byte for byte
    restore_seconds: float = 0.0  # the restore alone, from its start to its last commit
    problems: list[str] = field(default_factory=list)
    next_due: datetime | None = None  # set when no drill was due
    last_drill: str | None = None
    state_key: str = ""

    @property
    def ran(self) -> bool:
        return self.next_due is None

    @property
    def seconds_per_gb(self) -> float:
        """Restore seconds per GB (10^9 bytes) of archived objects: the RTO evidence."""
        return self.restore_seconds / (self.object_bytes / 1e9) if self.object_bytes else 0.0

    @property
    def ok(self) -> str:
        if not self.ran:
            return (f"the last drill ({self.last_drill}) passed; the next is due at "
                    f"{self.next_due.isoformat(timespec='minutes') if self.next_due else 'the next run'}")
        if not self.drilled:
            return f"topic {self.topic!r} has no committed window in s3://{self.bucket}/ to drill yet"
        return (f"{len(self.drilled)} of {self.windows} window(s) ({self.object_bytes} bytes of objects, "
                f"{self.records} records) restored into {self.scratch_topic!r} in {self.restore_seconds:.2f} s "
                f"({self.seconds_per_gb:.1f} s per GB) and read back: every record byte for byte and in order")

    def metadata(self) -> dict[str, Any]:
        """The check's metadata; `restore_seconds_per_gb` a float on every drill that ran, so Dagster plots it."""
        if not self.ran:
            return {"drilled": False, "last_drill": self.last_drill or "",
                    "next_due": self.next_due.isoformat() if self.next_due else "",
                    "state": f"s3://{self.bucket}/{self.state_key}"}
        return {"drilled": True, "windows_drilled": len(self.drilled), "windows": self.windows,
                "drilled_windows": self.drilled[:50], "scratch_topic": self.scratch_topic or "",
                "object_bytes": self.object_bytes, "record_bytes": self.record_bytes, "records": self.records,
                "records_compared": self.compared, "restore_seconds": float(round(self.restore_seconds, 3)),
                "restore_seconds_per_gb": float(round(self.seconds_per_gb, 3)),
                "state": f"s3://{self.bucket}/{self.state_key}"}
