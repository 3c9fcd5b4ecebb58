"""The loop of a continuous archive's long-lived run (docs/sensors.md, "Continuous archive"): read Kafka's offsets,
cut windows by the same rules as the offsets sensor (archive/plan.py), add them as the topic's dynamic partitions,
then write and commit them with the run path every archive run takes (archive_windows: the same commit protocol,
consumer group offsets, dead letters), and read the offsets again — the Spark session and the definitions stay
loaded between windows.

Windows are added as partitions before anything of them is written, and a window is done once its manifest is
committed; a run that stops anywhere in between (killed, crashed) leaves windows that are partitions but were never
materialized. The next run archives those first: a committed one is only verified again (commit.py's step 0), one
whose objects were written but not committed is written again by the protocol. Nothing is lost and nothing is
written twice.
"""

# No `from __future__ import annotations`: dataclass fields of Dagster types are read as they are.

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import dagster as dg

from s3_archive.archive.archive_lineage import archive_datasets
from s3_archive.archive.cursor import Tail, cron_due
from s3_archive.archive.driver.archive_run import NO_HOOKS, ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.coordinator import WindowOutcome, WindowResult, archive_windows
from s3_archive.archive.plan import MAX_WINDOWS_PER_TICK, Cut, plan_windows, run_chunks
from s3_archive.archive.scan import scan_topics
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.instance import read_windows
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.sensors import recent_bytes_per_record, window_ends
from s3_archive.io.lineage import lineage_run, run_uuid
from s3_archive.model.errors import RunEnded
from s3_archive.model.logger import Logger
from s3_archive.model.windows import OffsetWindow

STOP_CHECK_S = 0.1  # how often a wait looks at `stopping`


class WindowsFailed(Exception):
    """Windows of a batch failed: the run ends with them (the next run archives them first)."""

    def __init__(self, failed: dict[OffsetWindow, BaseException], windows: int) -> None:
        self.failed = failed
        lines = [f"{w.key}: {type(e).__name__}: {e}" for w, e in sorted(failed.items())]
        super().__init__("\n".join([f"{len(failed)} of {windows} windows failed:", *lines]))


@dataclass
class ContinuousLoop:
    """One topic's loop. `stopping()`: True once the run is to end (asked between batches and while waiting);
    `hooks`: the tests' levers, as for any archive run."""

    instance: dg.DagsterInstance
    cfg: ArchiveConfig
    topic: str
    ctx: ArchiveContext
    stopping: Callable[[], bool]
    hooks: ArchiveHooks = NO_HOOKS
    run_id: str = "continuous"  # the Dagster run's id: each batch's OpenLineage run id derives from it
    tail: Tail | None = None
    starts: dict[str, dict[int, int]] = field(default_factory=dict)  # start_position anchors (scan_topics)
    cron_handled: float | None = None
    bytes_per_record: float | None = None
    said: set[str] = field(default_factory=set)
    ended: bool = False  # a commit found the run canceled or ended (RunEnded)
    batches_done: int = 0

    def _stopping(self) -> bool:
        return self.ended or self.stopping()

    @property
    def log(self) -> Logger:
        return self.ctx.log

    def _say_once(self, msg: str) -> None:
        if msg not in self.said:
            self.said.add(msg)
            self.log.warning(msg)

    def unfinished(self) -> list[OffsetWindow]:
        """The topic's windows that are partitions but were never materialized, in offset order."""
        windows, _ = read_windows(self.instance, self.topic)
        done = self.instance.get_materialized_partitions(archive_asset_key(self.topic))
        return sorted(w for w in windows if w.key not in done)

    def cut(self, now: float) -> list[OffsetWindow]:
        """New windows by the archive's flush rules (and `schedule_cron`), added as the topic's partitions."""
        cfg, topic = self.cfg, self.topic
        self.tail = window_ends(self.instance, topic, self.tail, self.log)
        if cfg.flush.bytes is not None or cfg.bytes_per_run is not None:
            self.bytes_per_record = recent_bytes_per_record(self.instance, topic)
        tail = self.tail
        scan = self.ctx.kafka.riding(
            cfg.broker_outage_seconds,
            lambda: scan_topics(self.ctx.kafka, cfg, {topic: tail.next}, {topic: self.bytes_per_record},
                                int(now * 1000), self.starts), self.log)
        if topic in scan.missing:
            self._say_once(f"topic {topic!r} does not exist on {self.ctx.kafka.bootstrap_servers}; no window cut")
            return []
        if topic in scan.refused:
            self._say_once(f"topic {topic!r}: {scan.refused[topic]}")
            return []
        ts = scan.topics[topic]
        for msg in ts.behind:
            self._say_once(f"topic {topic!r} {msg} (was the topic deleted and recreated?); no window cut")
        cut_rest, tick = (False, None) if cfg.schedule_cron is None else \
            cron_due(cfg.schedule_cron, self.cron_handled, now)
        cuts = plan_windows(ts.states, MAX_WINDOWS_PER_TICK, cut_rest)
        if tick is not None and not (cut_rest and len(cuts) >= MAX_WINDOWS_PER_TICK):
            self.cron_handled = tick
        if cuts:
            self.instance.add_dynamic_partitions(window_partitions(topic).name, [c.window.key for c in cuts])
            self.log.info(f"topic {topic!r}: cut {len(cuts)} windows ("
                          + ", ".join(sorted({c.reason for c in cuts})) + ")")
        return [c.window for c in cuts]

    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stopping() and (left := end - time.monotonic()) > 0:
            time.sleep(min(STOP_CHECK_S, left))

    def batches(self, windows: list[OffsetWindow]) -> list[list[OffsetWindow]]:
        """Consecutive windows grouped as the offsets sensor groups them into runs (windows_per_run,
        bytes_per_run): one Spark job and one commit pass each."""
        cuts = [Cut(self.topic, w, "age") for w in windows]
        return [[c.window for c in chunk] for chunk in
                run_chunks(cuts, self.cfg.windows_per_run, self.cfg.bytes_per_run, self.bytes_per_record)]

    def _archive_batch(self, batch: list[OffsetWindow]) -> dict[OffsetWindow, WindowOutcome]:
        """One batch, one OpenLineage run (START, then COMPLETE with the committed windows' figures)."""
        cfg, topic, servers = self.cfg, self.topic, self.ctx.kafka.bootstrap_servers
        inputs, outputs = archive_datasets(cfg, topic, servers, batch)
        self.batches_done += 1
        with lineage_run(f"archive.{cfg.name}.{topic}", "ARCHIVE", run_uuid(self.run_id, self.batches_done),
                         inputs, outputs, self.log) as lineage:
            results = archive_windows(self.ctx, cfg, topic, batch, self.hooks)
            done = {w: r.manifest for w, r in results.items() if isinstance(r, WindowResult)}
            lineage.inputs, lineage.outputs = archive_datasets(cfg, topic, servers, batch, done)
        return results

    def archive(self, windows: list[OffsetWindow]) -> Iterator[WindowResult]:
        """Each batch of `windows` archived; each committed window's result as it comes. Raises WindowsFailed
        after a batch with failed windows; stops between batches once `stopping()`, or once a commit found the run
        canceled (the batch's windows not committed yet are the next run's)."""
        for batch in self.batches(windows):
            if self._stopping():
                return
            results = self._archive_batch(batch)
            failed: dict[OffsetWindow, BaseException] = {}
            for w in batch:
                r = results[w]
                if isinstance(r, WindowResult):
                    yield r
                elif isinstance(r, RunEnded):  # canceled while the batch ran: not committed, the next run's
                    self.ended = True
                else:
                    failed[w] = r
            if failed:
                raise WindowsFailed(failed, len(batch))

    def run(self) -> Iterator[WindowResult]:
        """The loop until `stopping()`: first the windows an earlier run left unfinished, then new ones."""
        todo = self.unfinished()
        if todo:
            self.log.info(f"topic {self.topic!r}: {len(todo)} windows cut before and never committed; archiving "
                          "them first")
        while not self._stopping():
            if not todo:
                todo = self.cut(time.time())
            if not todo:
                self.wait(self.cfg.continuous.poll_seconds if self.cfg.continuous else 1.0)
                continue
            yield from self.archive(todo)
            todo = []
