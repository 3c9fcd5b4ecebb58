"""Offset windows: the unit of archiving. Pure logic, no I/O.

A window is (kafka partition p, offsets [start, end)), end exclusive. It is one Dagster partition; its key is
`p00003-0000000000000001000-0000000000000002000`, zero-padded so that lexicographic order is (partition, offset)
order, and it parses back to the same window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from s3_archive.model.errors import UserError

PARTITION_DIGITS = 5
OFFSET_DIGITS = 19  # Kafka offsets are signed 64-bit: at most 9223372036854775807, 19 digits
MAX_PARTITION = 10**PARTITION_DIGITS - 1
MAX_OFFSET = 2**63 - 1

_KEY = re.compile(rf"p([0-9]{{{PARTITION_DIGITS}}})-([0-9]{{{OFFSET_DIGITS}}})-([0-9]{{{OFFSET_DIGITS}}})")


class InvalidWindow(UserError, ValueError):
    pass


@dataclass(frozen=True, order=True)
class OffsetWindow:
    partition: int
    start: int
    end: int  # exclusive

    def __post_init__(self) -> None:
        if not 0 <= self.partition <= MAX_PARTITION:
            raise InvalidWindow(f"kafka partition must be in 0..{MAX_PARTITION}, got {self.partition}")
        if not 0 <= self.start < self.end <= MAX_OFFSET:
            raise InvalidWindow(
                f"window offsets must satisfy 0 <= start < end <= {MAX_OFFSET}, got [{self.start}, {self.end})"
            )

    @property
    def key(self) -> str:
        return f"p{self.partition:0{PARTITION_DIGITS}d}-{self.start:0{OFFSET_DIGITS}d}-{self.end:0{OFFSET_DIGITS}d}"

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"p{self.partition} [{self.start}, {self.end})"

    @classmethod
    def parse(cls, key: str) -> OffsetWindow:
        m = _KEY.fullmatch(key)
        if m is None:
            raise InvalidWindow(
                f"not a window key: {key!r}; expected p<{PARTITION_DIGITS} digits>-<{OFFSET_DIGITS} digits>-"
                f"<{OFFSET_DIGITS} digits>, e.g. {OffsetWindow(3, 1000, 2000).key}"
            )
        try:
            return cls(int(m[1]), int(m[2]), int(m[3]))
        except InvalidWindow as e:
            raise InvalidWindow(f"window key {key!r}: {e}") from None


def check_contiguous(windows: list[OffsetWindow]) -> list[str]:
    """Problems in a set of windows: overlaps and holes per partition (empty when contiguous)."""
    problems: list[str] = []
    by_partition: dict[int, list[OffsetWindow]] = {}
    for w in windows:
        by_partition.setdefault(w.partition, []).append(w)
    for p, ws in sorted(by_partition.items()):
        ws.sort()
        reach = ws[0]  # the window reaching furthest so far
        for b in ws[1:]:
            if b.start < reach.end:
                problems.append(f"partition {p}: {reach} overlaps {b}")
            elif b.start > reach.end:
                problems.append(f"partition {p}: offsets [{reach.end}, {b.start}) are in no window")
            if b.end > reach.end:
                reach = b
    return problems


def next_offsets(windows: list[OffsetWindow]) -> dict[int, int]:
    """Per partition, where the next window starts: the end of the last existing window."""
    out: dict[int, int] = {}
    for w in windows:
        out[w.partition] = max(out.get(w.partition, 0), w.end)
    return out
