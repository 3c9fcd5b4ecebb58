"""The offsets sensor's cursor (`context.cursor`, JSON): what a tick must remember that the partition keys cannot
tell, and a summary of the keys it has read so that a tick reads only the keys added since.

    {"cron_tick": 1767261600.0,          # schedule_cron: the latest cron tick whose rests were cut (epoch s, UTC)
     "starts": {"<topic>": {"0": 12}},   # start_position latest, consumer_group: a windowless partition's start
     "tails": {"<topic>": {"after": "<instance position>", "next": {"0": 5000}, "first": {"0": 0}}},
     "open": {"<topic>": {"seen": 812, "keys": ["<window key>", ...]}},
     "failures": 9120,                   # the last run failure read (event storage id)
     "verdicts": {"<topic>": {"archive_fresh": "ok"}},   # what the check results the sensor reported last said
     "sweep": "<topic>"}                 # where the manifest sweep goes on (sweep.py)

`tails` is only a summary of the keys: per Kafka partition the end of its last window (`next`), as of the
instance's position `after` (insertion order of the topic's dynamic partition keys). A tick reads the keys added
after that position (usually its own previous tick's) and takes the highest end. Which offsets have windows is still
only known from the keys (and the retirement record, defs/archive/instance.py): a lost cursor rebuilds `tails` from
all keys, and a stale one (a tick evaluated again) reads from an older position and sees every key added since, so
neither can make a tick cut a window that overlaps one that exists.

`open` is the sensor's upkeep (defs/archive/upkeep.py, sweep.py): per topic the windows not yet seen committed, and
the last materialization read (`seen`, an event storage id). Every window key the tick reads or cuts becomes open; a
materialization of it closes it. So everything between a partition's `first` window start and `next` that is not
open is committed — what the freshness check, the lost-manifest sweep and the re-requests of failed runs start
from. A lost cursor rebuilds it from every key and their materialization status once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from croniter import croniter

from s3_archive.model.windows import InvalidWindow, OffsetWindow


@dataclass
class Tail:
    """Where each Kafka partition's windows end (`next`) and start (`first`: its first window, or its retired
    range), as of the instance position `after` (None: before any key)."""

    after: str | None
    next: dict[int, int] = field(default_factory=dict)
    first: dict[int, int] = field(default_factory=dict)


@dataclass
class Open:
    """A topic's windows not seen committed yet (keys), and the storage id of the last materialization of the topic
    read (None: none read yet)."""

    seen: int | None = None
    keys: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # of `keys`: committed windows whose manifest went, archived again


@dataclass
class SensorCursor:
    cron_tick: float | None = None
    starts: dict[str, dict[int, int]] = field(default_factory=dict)
    tails: dict[str, Tail] = field(default_factory=dict)
    open: dict[str, Open] = field(default_factory=dict)
    failures: int | None = None
    verdicts: dict[str, dict[str, str]] = field(default_factory=dict)
    sweep: str | None = None

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
                                  {int(p): int(o) for p, o in v["next"].items()},
                                  {int(p): int(o) for p, o in v.get("first", {}).items()})
                     for t, v in data.get("tails", {}).items()}
            open_ = {str(t): Open(None if v["seen"] is None else int(v["seen"]), [str(k) for k in v["keys"]],
                                  [str(k) for k in v.get("lost", [])])
                     for t, v in data.get("open", {}).items()}
            failures = data.get("failures")
            verdicts = {str(t): {str(c): str(said) for c, said in v.items()}
                        for t, v in data.get("verdicts", {}).items()}
            sweep = data.get("sweep")
            return cls(float(tick) if tick is not None else None, starts, tails, open_,
                       None if failures is None else int(failures), verdicts, None if sweep is None else str(sweep))
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise ValueError(f"unreadable offsets sensor cursor {text[:80]!r}: {e}") from None

    def dump(self) -> str:
        starts = {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.starts.items()) if ps}
        tails = {t: {"after": v.after, "next": {str(p): o for p, o in sorted(v.next.items())},
                     "first": {str(p): o for p, o in sorted(v.first.items())}}
                 for t, v in sorted(self.tails.items())}
        open_ = {t: {"seen": v.seen, "keys": v.keys, **({"lost": v.lost} if v.lost else {})}
                 for t, v in sorted(self.open.items())}
        return json.dumps({"cron_tick": self.cron_tick, "starts": starts, "tails": tails, "open": open_,
                           "failures": self.failures, "verdicts": self.verdicts, "sweep": self.sweep},
                          sort_keys=True)


def open_windows(cursor: SensorCursor, topic: str) -> dict[int, list[OffsetWindow]]:
    """The topic's open windows (cut, not seen committed) per Kafka partition, in offset order; a key that is not a
    window is left out."""
    out: dict[int, list[OffsetWindow]] = {}
    for k in cursor.open.get(topic, Open()).keys:
        try:
            w = OffsetWindow.parse(k)
        except InvalidWindow:
            continue
        out.setdefault(w.partition, []).append(w)
    return {p: sorted(ws) for p, ws in out.items()}


def last_cron_tick(cron: str, now: float) -> float:
    """The latest tick of `cron` (UTC) before `now` (epoch seconds)."""
    return croniter(cron, datetime.fromtimestamp(now, UTC)).get_prev(float)


def cron_due(cron: str, handled: float | None, now: float) -> tuple[bool, float]:
    """Whether a tick of `cron` passed since the one `handled`, and the latest tick. With none handled yet (the
    sensor just started, or its cursor was reset) nothing is due: like a schedule turned on, the first cut comes
    at the next tick."""
    tick = last_cron_tick(cron, now)
    return handled is not None and tick > handled, tick
