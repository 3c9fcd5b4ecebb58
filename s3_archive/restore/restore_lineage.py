"""A restore run's OpenLineage datasets (io/lineage.py): the archive's S3 location it reads, the Kafka topic it
produces into. Pure: from the run's windows and, as they are done, their reports."""

from __future__ import annotations

from collections.abc import Sequence

from s3_archive.io.lineage import LineageDataset, WindowRange, kafka_dataset, s3_dataset
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import WindowReport


def restore_datasets(source: tuple[str, str], bootstrap_servers: str, target_topic: str,
                     windows: Sequence[OffsetWindow], reports: Sequence[WindowReport] = (),
                     ) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """(inputs, outputs): `source` (bucket, the topic's folder) with the run's windows (records: as archived),
    and the target topic with the windows restored (records: produced now; those already present are skipped);
    their records and bytes once reported."""
    done = {r.window: r for r in reports}
    read = [WindowRange(w.key, w.partition, w.start, w.end, done[w].archived if w in done else None)
            for w in sorted(windows)]
    wrote = [WindowRange(r.window.key, r.window.partition, r.window.start, r.window.end, r.restored)
             for r in sorted(reports, key=lambda r: r.window)]
    inputs = s3_dataset(*source, read)
    outputs = kafka_dataset(bootstrap_servers, target_topic, wrote)
    if reports:
        inputs = inputs.counted(sum(r.archived for r in reports), None, sum(r.objects for r in reports))
        outputs = outputs.counted(sum(r.restored for r in reports), sum(r.bytes for r in reports))
    return [inputs], [outputs]
