"""The restore ledger: which source offsets are already in the target, as merged range sets, and their encoding as
committed-offset metadata (one entry per target partition bucket). Pure; restore/producer.py stores it in Kafka.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable

from s3_archive.model.errors import RestoreFailed

# Kafka's default offset.metadata.max.bytes is 4096; one ledger entry must fit.
MAX_LEDGER_ENTRY_BYTES = 4000


class RangeSet:
    """Disjoint, sorted, merged half-open integer ranges [a, b)."""

    def __init__(self, ranges: Iterable[Iterable[int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for a, b in ranges:
            self.add(a, b)

    def add(self, a: int, b: int) -> None:
        if a >= b:
            return
        # Every range touching or overlapping [a, b) is merged into it.
        lo = bisect.bisect_left(self._ends, a)
        hi = bisect.bisect_right(self._starts, b)
        if lo < hi:
            a = min(a, self._starts[lo])
            b = max(b, self._ends[hi - 1])
        self._starts[lo:hi] = [a]
        self._ends[lo:hi] = [b]

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._starts, x) - 1
        return i >= 0 and x < self._ends[i]

    def overlaps(self, a: int, b: int) -> bool:
        """Whether any offset of [a, b) is in the set."""
        i = bisect.bisect_right(self._ends, a)  # the first range ending after a
        return a < b and i < len(self._starts) and self._starts[i] < b

    def ranges(self) -> list[list[int]]:
        return [[a, b] for a, b in zip(self._starts, self._ends)]

    def size(self) -> int:
        return sum(b - a for a, b in zip(self._starts, self._ends))

    def copy(self) -> RangeSet:
        return RangeSet(self.ranges())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and self.ranges() == other.ranges()

    def __repr__(self) -> str:
        return f"RangeSet({self.ranges()})"


def encode_ledger(source_topic: str, ledger: dict[int, RangeSet], num_target: int,
                  buckets: Iterable[int]) -> dict[int, tuple[int, str]]:
    """Ledger entries to commit: bucket (a target partition number) -> (offset, metadata JSON).

    Source partition sp lives in bucket sp % num_target; the committed offset is the number of source offsets the
    bucket covers (informative only; it must be >= 0 for the client to send it)."""
    out: dict[int, tuple[int, str]] = {}
    for b in sorted(set(buckets)):
        parts = {sp: rs for sp, rs in sorted(ledger.items()) if sp % num_target == b}
        meta = json.dumps({"v": 1, "source": source_topic,
                           "ranges": {str(sp): rs.ranges() for sp, rs in parts.items()}}, separators=(",", ":"))
        if len(meta.encode()) > MAX_LEDGER_ENTRY_BYTES:
            raise RestoreFailed(
                f"the restore ledger for source partitions {sorted(parts)} no longer fits in one committed-offset "
                f"entry ({len(meta)} bytes > {MAX_LEDGER_ENTRY_BYTES}): too many separate restored ranges. "
                "Restore the gaps between already restored windows to merge them")
        out[b] = (sum(rs.size() for rs in parts.values()), meta)
    return out


def decode_ledger(source_topic: str, metadatas: Iterable[str | None]) -> dict[int, RangeSet]:
    """Union of all entries (old entries from before the target gained partitions stay valid: ranges only grow)."""
    ledger: dict[int, RangeSet] = {}
    for meta in metadatas:
        if not meta:
            continue
        try:
            doc = json.loads(meta)
            ok = doc.get("v") == 1 and doc.get("source") == source_topic
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise RestoreFailed(f"committed-offset metadata of the restore ledger is not an s3-archive ledger for "
                                f"source {source_topic!r}: {meta[:200]!r}; was the consumer group used by something "
                                "else?")
        for sp, ranges in doc["ranges"].items():
            rs = ledger.setdefault(int(sp), RangeSet())
            for a, b in ranges:
                rs.add(a, b)
    return ledger
