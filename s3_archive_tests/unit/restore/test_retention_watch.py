"""Records older than the target's retention are deleted by the broker soon after they are restored: our archives
are warned about before the run (manifests know their oldest record); a sink's objects, whose timestamps are only
known once read, get the same warning from the first batch that old."""

import time

from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.batch import Records, WindowSource
from s3_archive.restore.run import watch_retention

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: str) -> None:
        self.warnings.append(msg)


def source(partition: int, timestamps: list[list[int]], min_timestamp_ms: int | None = None) -> WindowSource:
    """A window whose batches carry `timestamps` (one list per batch)."""
    batches = [Records([partition] * len(ts), list(range(len(ts))), [None] * len(ts), [b"v"] * len(ts),
                       [[] for _ in ts], ts, [1] * len(ts)) for ts in timestamps]
    return WindowSource(OffsetWindow(partition, 0, 100), lambda: iter(batches), min_timestamp_ms=min_timestamp_ms)


def read(srcs: list[WindowSource]) -> list[list[int]]:
    return [b.timestamps for s in srcs for b in s.batches()]


def test_a_sinks_records_older_than_the_retention_are_warned_about_once_as_they_are_read():
    now = int(time.time() * 1000)
    old = 1_700_000_000_000  # 2023
    srcs = [source(0, [[now - DAY_MS], [0, old, now]]), source(1, [[old]])]
    log = Log()
    watched = watch_retention(srcs, "dst", WEEK_MS, log)
    assert read(watched) == read(srcs)  # the batches pass through unchanged
    assert log.warnings == [f"target topic 'dst' has retention.ms={WEEK_MS}, but a record of window "
                            f"{OffsetWindow(0, 0, 100).key} being restored is from 2023-11-14T22:13:20+00:00: the "
                            "broker will delete such records soon after they are restored. Set retention.ms=-1 on "
                            "the target first"]


def test_no_warning_for_recent_or_unstamped_records_unlimited_retention_or_known_timestamps():
    now = int(time.time() * 1000)
    log = Log()
    assert read(watch_retention([source(0, [[now - DAY_MS, 0, -1], []])], "dst", WEEK_MS, log)) == \
        [[now - DAY_MS, 0, -1], []]
    ours = [source(0, [[1]], min_timestamp_ms=1)]  # our archives: checked before the run from the manifests
    assert watch_retention(ours, "dst", WEEK_MS, log) == ours
    unlimited = [source(0, [[1]])]
    assert watch_retention(unlimited, "dst", -1, log) == unlimited
    assert log.warnings == []


def test_the_retention_is_asked_for_at_the_first_batch_watched():
    """The readers start before the target's config is read: the retention comes from a callable, asked once a
    batch is read."""
    now = int(time.time() * 1000)
    old = 1_700_000_000_000
    asked: list[int] = []

    def retention(ms: int):
        def get() -> int:
            asked.append(ms)
            return ms
        return get

    log = Log()
    watched = watch_retention([source(0, [[old]])], "dst", retention(WEEK_MS), log)
    assert asked == []
    assert read(watched) == [[old]] and asked == [WEEK_MS] and len(log.warnings) == 1
    assert read(watch_retention([source(0, [[old], [now]])], "dst", retention(-1), log)) == [[old], [now]]
    assert len(log.warnings) == 1  # unlimited retention: no warning
