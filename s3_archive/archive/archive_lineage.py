"""An archive run's OpenLineage datasets (io/lineage.py): the Kafka topic it reads, the S3 location it writes.

Pure: from the run's windows and, once they are done, their manifests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.lineage import (
    LineageDataset,
    WindowRange,
    glue_table_name,
    kafka_dataset,
    s3_dataset,
    spark_columns,
)
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow


def _ranges(windows: Sequence[OffsetWindow], manifests: Mapping[OffsetWindow, Manifest]) -> list[WindowRange]:
    return [WindowRange(w.key, w.partition, w.start, w.end,
                        manifests[w].record_count if w in manifests else None) for w in sorted(windows)]


def archive_datasets(cfg: ArchiveConfig, topic: str, bootstrap_servers: str, windows: Sequence[OffsetWindow],
                     manifests: Mapping[OffsetWindow, Manifest] | None = None, glue: tuple[str, str] | None = None,
                     ) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """(inputs, outputs): the topic with the windows' offset ranges; the topic's S3 location with the windows
    committed (`manifests`: each done window's manifest, committed now or before), their records, bytes and objects,
    and the columns stored (the newest window's schema). An Iceberg archive's table is an output too, named as its
    catalog names it (`iceberg_table_name`; `glue`: the Glue catalog's region and account id, None: not known), and
    the location's symlink."""
    manifests = manifests or {}
    ranges = _ranges(windows, manifests)
    source = kafka_dataset(bootstrap_servers, topic, ranges)
    target = s3_dataset(cfg.bucket, f"{cfg.prefix}{topic}", [r for r in ranges if r.records is not None])
    done = [manifests[w] for w in sorted(manifests)]
    if not done:
        return [source], [target]
    records = sum(m.record_count for m in done)
    source = source.counted(records, sum(m.bytes_read for m in done))
    target = target.counted(records, sum(m.bytes_written for m in done), sum(len(m.objects) for m in done))
    newest = max(done, key=lambda m: (m.committed_at, m.partition))
    target = replace(target, columns=spark_columns(newest.spark_schema))
    if newest.iceberg_table is None:
        return [source], [target]
    table = iceberg_table_name(cfg, newest.iceberg_table, glue)
    target = replace(target, table=table)
    named = table[0].startswith(("arn:aws:glue:", "postgres://"))  # the spec's naming; not a fallback's
    extra = [LineageDataset(*table, windows=target.windows, records=records, columns=target.columns)] if named else []
    return [source], [target, *extra]


def iceberg_table_name(cfg: ArchiveConfig, ident: str, glue: tuple[str, str] | None) -> tuple[str, str]:
    """(namespace, name) of an Iceberg table (`ident`: catalog.database.table) as OpenLineage's naming spec names its
    catalog's tables: a Glue catalog's `arn:aws:glue:<region>:<account>` + `table/<database>/<table>`; a JDBC catalog
    on PostgreSQL `postgres://<host>:<port>` + `<database>.<namespace>.<table>`. Where the spec names none (a
    SQLite catalog; a Glue catalog whose account is not known): `iceberg:<catalog>` + the identifier."""
    _, database, table = ident.rsplit(".", 2)
    options = cfg.iceberg
    if options is not None and options.catalog == "jdbc":
        pg = re.fullmatch(r"jdbc:postgresql://([^/?]+)/([^?]+)(\?.*)?", options.jdbc_uri or "")
        if pg:
            host = pg[1] if ":" in pg[1].rsplit("]", 1)[-1] else f"{pg[1]}:5432"
            return f"postgres://{host}", f"{pg[2]}.{database}.{table}"
        return "iceberg:jdbc", ident
    if glue is None:
        return "iceberg:glue", ident
    return glue_table_name(*glue, database, table)
