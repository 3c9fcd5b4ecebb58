"""The archive's progress as a Kafka consumer group's offsets, so that Kafka's own tools (`kafka-consumer-groups.sh
--describe`, Burrow, lag exporters) show how far behind it is (docs/sensors.md, "Lag in Kafka's tools").

After a run's commits, each partition's group offset moves to the end of the committed windows that follow it
without a hole: windows commit out of order (runs in parallel, a failed window re-run later), so the manifests in S3
say how far the committed windows reach, one listing per partition from the current group offset on. A partition
the group has no offset for yet starts at its first window once that one is committed. No listing is needed where
Kafka's high watermark, read after the commits, settles it: a window ends at most there, so when the group offset
is already there, or the run's own committed windows lead from it (or, for a partition without one, from offset 0)
to there, no other manifest can follow. The offsets
are written through the admin API: nothing joins the group. Nothing reads them back either — the manifests stay the
commit point — so a refused write (an ACL, a consumer using the same group) is a warning, never a failed window.
Windows end at most at the last stable offset, so the group's offsets never point into an open transaction.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.objects import manifests_from, partition_manifest_prefix
from s3_archive.model.errors import KafkaUnavailable
from s3_archive.model.logger import Logger
from s3_archive.model.windows import InvalidWindow, OffsetWindow


def committed_end(s3: S3Client, cfg: ArchiveConfig, topic: str, partition: int, since: int | None,
                  log_start: int | None = None) -> int | None:
    """Where the committed windows of the partition that follow one another from `since` end; None when no
    manifest starts there. With no `since` (the group has no offset yet), from the partition's first manifest, if
    that is the partition's first window: it starts at or before Kafka's `log_start` (None: taken as it is, for
    `start_position` other than earliest)."""
    pos = since
    start_after = manifests_from(cfg.prefix, topic, partition, since) if since is not None else None
    for o in list_objects(s3, cfg.bucket, partition_manifest_prefix(cfg.prefix, topic, partition), start_after):
        try:
            w = OffsetWindow.parse(o["Key"].rsplit("/", 1)[-1].removesuffix(".json"))
        except InvalidWindow:
            continue
        if pos is None:
            if log_start is not None and w.start > log_start:
                return None  # an earlier window may not be committed yet: wait until it is
            pos = w.start
        if w.start != pos:
            break
        pos = w.end
    return None if pos == since else pos


def settled_end(since: int | None, ours: list[OffsetWindow], high_watermark: int) -> tuple[bool, int | None]:
    """(True, committed_end's answer) when Kafka's `high_watermark` settles it without a listing; (False, None) when
    only the manifests can. `ours`: the partition's windows committed as this run ended (any attempt's). A window
    ends at most at the high watermark, so none starts there or later: a group offset already there moves no
    further, and the run's windows leading from the group offset (or from offset 0, where a partition's first
    window starts, for a group without one) to the high watermark reach as far as any committed window can."""
    if since is not None and since >= high_watermark:
        return True, None
    pos = 0 if since is None else since
    for w in sorted(ours):
        if w.start == pos:
            pos = w.end
        elif w.start > pos:
            break
    if pos < high_watermark or (since is None and pos == 0):
        return False, None
    return True, (None if pos == since else pos)


def advance_group_offsets(kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str,
                          committed: list[OffsetWindow], log: Logger) -> dict[int, int]:
    """Move the archive's consumer group offsets of the partitions of `committed` (the windows committed as this
    run ended) to where their committed windows reach; the offsets written. Never raises: a warning says what
    failed."""
    group = cfg.group_id
    partitions = sorted({w.partition for w in committed})
    if group is None or not partitions:
        return {}
    try:
        current = kafka.group_offsets(group, topic, partitions)
        watermark = kafka.offsets(topic, "latest", partitions)
        fresh = [p for p in partitions if p not in current]
        # A partition the group has no offset for yet starts at its first window; with start_position earliest
        # that one starts at or before Kafka's log start (retention only moves it forward).
        log_start = kafka.offsets(topic, "earliest", fresh) if fresh and cfg.start_position == "earliest" else {}
        ends = {}
        for p in partitions:
            settled, end = settled_end(current.get(p), [w for w in committed if w.partition == p], watermark[p])
            ends[p] = end if settled else committed_end(s3, cfg, topic, p, current.get(p), log_start.get(p))
        moved = {p: e for p, e in ends.items() if e is not None and e > current.get(p, -1)}
        kafka.set_group_offsets(group, topic, moved, note="s3-archive: committed windows end here")
    except (KafkaUnavailable, ClientError, BotoCoreError) as e:
        log.warning(f"topic {topic!r}: the committed ends were not written as consumer group {group!r}'s offsets "
                    f"({e}); the manifests are the archive's record, and the next run writes them. Kafka needs the "
                    "group's Read permission (and the topic's Describe) for it; or set consumer_group_offsets: false")
        return {}
    if moved:
        log.info(f"topic {topic!r}: consumer group {group!r} offsets now "
                 + ", ".join(f"p{p}: {o}" for p, o in sorted(moved.items())))
    return moved
