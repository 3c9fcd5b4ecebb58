"""The catalog asset: one per archived topic; keeps the topic's Glue table (and its partitions) current.

Not partitioned: one table covers every window. It depends on the topic's archive asset and refreshes when
windows land. The Glue client is built from the `s3` resource's region, endpoint and credentials (the local
stack's moto server answers S3 and Glue on one endpoint; on AWS both use the default endpoints).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

import dagster as dg

from s3_archive.catalog.avro_header import WriterSchemaUnreadable, table_writer_schema
from s3_archive.catalog.catalog_lineage import catalog_datasets
from s3_archive.catalog.glue import TableConflict, latest_schemas, sync_table
from s3_archive.catalog.mappings import mapping, no_table_reason
from s3_archive.catalog.table_partitions import PARTITION_KEY, partition_keys
from s3_archive.catalog.tables import (
    athena_ddl,
    build_table_input,
    catalog_tables,
    decoded_columns,
    location,
    table_columns,
    table_name,
)
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.settings import KeyPaths, Settings
from s3_archive.defs.archive.partitions import archive_asset_key
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.lineage import LineageRun, glue_account, lineage_run, run_uuid
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import AwsRequestFailed, KafkaUnavailable, UnknownTopic

CATALOG_PREFIX = "kafka_catalog"

# `eager()` without its "no dependency partition missing or in progress" gates: the archive asset has one
# partition per window, and a window that is cut but not archived yet (or failed, e.g. on data loss) would hold
# the table back indefinitely. The table only describes the layout, so it is safe to refresh at any time.
# `missing()` rather than `newly_missing()`, so a table missing when first deployed is created too.
CATALOG_AUTOMATION = (
    (dg.AutomationCondition.missing() | dg.AutomationCondition.any_deps_updated()
     | dg.AutomationCondition.code_version_changed()).since_last_handled()
    & ~dg.AutomationCondition.in_progress()
).with_label("refresh when windows land")

log = logging.getLogger(__name__)


def catalog_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey([CATALOG_PREFIX, topic])


# Stands in for the avro writer schema in the code version: it is read from an archived object at run time (no I/O
# when definitions load), and the config it follows (envelope, value_decoding) shapes the hashed columns already.
_WRITER_SCHEMA_AT_RUN_TIME = "(the writer schema in the newest archived object's header)"


def _code_version(cfg: ArchiveConfig, topic: str, options: CatalogOptions) -> str:
    # The table input minus what only Kafka and S3 know at run time (the partition count, the avro writer schema):
    # a config change re-runs it.
    spec = build_table_input(cfg, topic, options, 1, writer_schema=_WRITER_SCHEMA_AT_RUN_TIME)
    spec["Parameters"].pop(f"projection.{PARTITION_KEY}.range", None)
    return hashlib.sha256(json.dumps([options.database, options.partitions, spec], sort_keys=True)
                          .encode()).hexdigest()[:16]


def _column_schema(table_input: dict[str, Any]) -> dg.TableSchema:
    cols = [*table_input["StorageDescriptor"]["Columns"], *table_input["PartitionKeys"]]
    return dg.TableSchema(columns=[dg.TableColumn(c["Name"], c["Type"], description=c.get("Comment"))
                                   for c in cols])


def _columns(cfg: ArchiveConfig, topic: str, qualified: str, s3: S3Resource, log: Any,
             ) -> tuple[list[dict[str, str]] | None, dict[str, str]]:
    """(the table's columns with the decoded fields, None: the layout's own; the manifests whose schema does not
    parse, each a logged warning)."""
    if not cfg.decodes_fields:
        return None, {}
    # decoded fields: from the newest window of each partition
    decoded, skipped = decoded_columns(cfg, latest_schemas(s3.get_client(), cfg.bucket, cfg.prefix, topic, log))
    for key, why in skipped.items():
        log.warning(f"manifest s3://{cfg.bucket}/{key}: its schema does not parse ({why}); the fields of that window "
                    f"are not added to {qualified}")
    return table_columns(cfg) + decoded, skipped


def build_catalog_asset(cfg: ArchiveConfig, topic: str, options: CatalogOptions) -> dg.AssetsDefinition:
    table = table_name(topic, options)
    qualified = f"{options.database}.{table}"
    keys = ", ".join(k["Name"] for k in partition_keys(cfg))

    @dg.asset(
        key=catalog_asset_key(topic),
        deps=[archive_asset_key(topic)],
        automation_condition=CATALOG_AUTOMATION,
        code_version=_code_version(cfg, topic, options),
        group_name=f"archive_{cfg.name}",
        kinds={"glue", "athena"},
        metadata={"table": qualified, "location": location(cfg, topic), "partition_mode": options.partitions},
        description=f"Glue table {qualified} over s3://{cfg.bucket}/{cfg.prefix}{topic}/ ({cfg.format}), "
                    f"partitioned by {keys} ({options.partitions}); queryable from Athena.",
    )
    def _catalog(context: dg.AssetExecutionContext, kafka: KafkaResource, s3: S3Resource) -> dg.MaterializeResult:
        glue = glue_account(s3.glue_account, context.log)  # only when lineage is on: one STS call per process
        inputs, outputs = catalog_datasets(cfg, topic, options.database, table, glue)
        with lineage_run(f"catalog.{cfg.name}.{topic}", "CATALOG", run_uuid(context.run_id, context.retry_number),
                         inputs, outputs, context.log) as lineage:
            return _sync(context, kafka, s3, lineage, glue)

    def _sync(context: dg.AssetExecutionContext, kafka: KafkaResource, s3: S3Resource, lineage: LineageRun,
              glue: tuple[str, str] | None) -> dg.MaterializeResult:
        try:
            partitions = kafka.partitions(topic)
        except (UnknownTopic, KafkaUnavailable) as e:
            raise dg.Failure(f"catalog of {topic!r} needs its partition count from Kafka: {e}") from None
        columns, skipped_schemas = _columns(cfg, topic, qualified, s3, context.log)
        writer = None
        if mapping(cfg).writer_schema_parameter is not None:  # avro: the literal is an archived object's header
            try:
                writer = table_writer_schema(s3.get_client(), cfg, topic, qualified, context.log)
            except WriterSchemaUnreadable as e:
                raise dg.Failure(str(e)) from None
            if writer is None:
                reason = (f"no window of {topic!r} with records is archived yet; table {qualified} is created by the "
                          "first catalog run after one is (its avro.schema.literal is the writer schema in an "
                          "archived object's header)")
                context.log.info(reason)
                lineage.outputs = []  # no table written
                return dg.MaterializeResult(metadata={"table_action": "deferred", "reason": reason,
                                                      "location": location(cfg, topic)})
        table_input = build_table_input(cfg, topic, options, max(partitions) + 1, columns,
                                        writer.literal if writer else None)
        try:
            result = sync_table(s3.glue_client(), s3.get_client(), cfg, topic, options, table_input)
        except (AwsRequestFailed, TableConflict) as e:
            raise dg.Failure(str(e)) from None
        lineage.inputs, lineage.outputs = catalog_datasets(cfg, topic, options.database, table, glue, table_input)
        for d in result.skipped_directories:
            context.log.warning(f"{location(cfg, topic)}{d.directory + '/' if d.directory else ''} (e.g. object "
                                f"{d.key!r}) is not a partition directory of the layout ({d.reason}); not registered "
                                f"as a partition of {qualified}")
        context.log.info(f"table {qualified}: {result.table_action}"
                         + (f" ({', '.join(result.changes)})" if result.changes else "")
                         + (f"; partitions added: {result.partitions_added}" if result.partitions_added else ""))
        ddl = athena_ddl(options.database, table_input)
        return dg.MaterializeResult(metadata={
            "dagster/table_name": qualified,
            "dagster/column_schema": _column_schema(table_input),
            "table_action": result.table_action,
            "changes": dg.MetadataValue.json(result.changes),
            "database_created": result.database_created,
            "kafka_partitions": len(partitions),
            "partition_mode": options.partitions,
            "partitions_added": dg.MetadataValue.json(result.partitions_added),
            "partitions_registered": len(result.partitions_added) + len(result.partitions_existing),
            "location": location(cfg, topic),
            "skipped_schemas": len(skipped_schemas),
            **({"avro_schema_from": f"s3://{cfg.bucket}/{writer.object_key}"} if writer else {}),
            "skipped_directories": len(result.skipped_directories),
            "ddl": dg.MetadataValue.md(f"```sql\n{ddl}\n```"),
        })

    return _catalog


def build_catalog_assets(settings: Settings, options: Mapping[str, CatalogOptions] | None = None,
                         paths: KeyPaths | None = None) -> list[dg.AssetsDefinition]:
    unknown = sorted(set(options or {}) - {a.name for a in settings.archives})
    if unknown:
        raise ValueError(f"catalog options for unknown archives {unknown}; archives: "
                         f"{[a.name for a in settings.archives]}")
    for a in settings.archives:
        reason = no_table_reason(a)
        if reason is not None and a.topics:
            log.warning(f"archive {a.name!r} gets no Glue table: {reason}")
    return [build_catalog_asset(a, t, o) for a, t, o in catalog_tables(settings, options,
                                                                         paths or KeyPaths.of(settings))]


def build_catalog_defs(settings: Settings, options: Mapping[str, CatalogOptions] | None = None,
                       paths: KeyPaths | None = None) -> dg.Definitions:
    """Catalog assets of every archived topic (need the `kafka` and `s3` resources).

    `options`: archive name -> CatalogOptions; an archive not in it uses its `catalog` setting or the defaults.
    `paths`: where each archive and topic is in the config as loaded (default: in `settings`), for the errors.
    """
    return dg.Definitions(assets=build_catalog_assets(settings, options, paths))
