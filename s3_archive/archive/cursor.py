"""The offsets sensor's cursor (`context.cursor`, JSON): what a tick must remember that the partition keys cannot
tell, and a summary of the keys it has read so that a tick reads only the keys added since.

    {"cron_tick": 1767261600.0,          # schedule_cron: the latest cron tick whose rests were cut (epoch s, UTC)
     "starts": {"<topic>": {"0": 12}},   # start_position latest, consumer_group: a windowless partition's start
     "tails": {"<topic>": {"after": "<instance position>", "next": {"0": 5000}}}}

`tails` is only a summary of the keys: per Kafka partition the end of its last window (`next`), as of the
instance's position `after` (insertion order of the topic's dynamic partition keys). A tick reads the keys added
after that position (usually its own previous tick's) and takes the highest end. Which offsets have windows is still
only known from the keys (and the retirement record, defs/archive/instance.py): a lost cursor rebuilds `tails` from
all keys, and a stale one (a tick evaluated again) reads from an older position and sees every key added since, so
neither can make a tick cut a window that overlaps one that exists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from croniter import croniter


@dataclass
class Tail:
    """Where each Kafka partition's windows end, as of the instance position `after` (None: before any key)."""

    after: str | None
    next: dict[int, int] = field(default_factory=dict)


@dataclass
class SensorCursor:
    cron_tick: float | None = None
    starts: dict[str, dict[int, int]] = field(default_factory=dict)
    tails: dict[str, Tail] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> SensorCursor:
        """The cursor; an empty one when there is none. ValueError, naming the problem, when it cannot be read."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
            tick = data.get("cron_tick")
            starts = {str(t): {int(p): int(o) for p, o in ps.items()} for t, ps in data.get("starts", {}).items()}
            tails = {str(t): Tail(None if v["after"] is None else str(v["after"]),
                                  {int(p): int(o) for p, o in v["next"].items()})
                     for t, v in data.get("tails", {}).items()}
            return cls(float(tick) if tick is not None else None, starts, tails)
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise ValueError(f"unreadable offsets sensor cursor {text[:80]!r}: {e}") from None

    def dump(self) -> str:
        starts = {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.starts.items()) if ps}
        tails = {t: {"after": v.after, "next": {str(p): o for p, o in sorted(v.next.items())}}
                 for t, v in sorted(self.tails.items())}
        return json.dumps({"cron_tick": self.cron_tick, "starts": starts, "tails": tails}, sort_keys=True)


def last_cron_tick(cron: str, now: float) -> float:
    """The latest tick of `cron` (UTC) before `now` (epoch seconds)."""
    return croniter(cron, datetime.fromtimestamp(now, UTC)).get_prev(float)


def cron_due(cron: str, handled: float | None, now: float) -> tuple[bool, float]:
    """Whether a tick of `cron` passed since the one `handled`, and the latest tick. With none handled yet (the
    sensor just started, or its cursor was reset) nothing is due: like a schedule turned on, the first cut comes
    at the next tick."""
    tick = last_cron_tick(cron, now)
    return handled is not None and tick > handled, tick
