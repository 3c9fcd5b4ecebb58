"""The `erase` job: records erased on request from an archived topic (UI: launchpad config; CLI `s3-archive erase`).
One job for every archive: the config's `topic` picks the archive. What it does is erasure/erase_run.py's; the run
shows each window rewritten, an observation of the topic's archive asset carries the counts (docs/compliance.md),
and a run that is not a dry run emits its lineage (erasure/erase_lineage.py, docs/lineage.md)."""

# No `from __future__ import annotations`: Dagster reads the context, config and resource annotations.

import dagster as dg
from pydantic import Field

from s3_archive.config.settings import Settings
from s3_archive.defs.archive.partitions import archive_asset_key
from s3_archive.defs.metadata import typed
from s3_archive.erasure.erase_lineage import traced_erase
from s3_archive.erasure.erasure import EraseRequest, FieldEquals, parse_equals, parse_key
from s3_archive.erasure.iceberg_erase import TableSession
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.lineage import run_uuid
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import SparkResource
from s3_archive.model.errors import UserError

ERASE_JOB = "erase"


class PredicateConfig(dg.Config):
    field: str = Field(description="a field decoded from the records' values (a column of the window's objects)")
    equals: str = Field(description="records whose field equals this are erased: JSON (42, true, \"text\"), or "
                                    "else the text itself")


class EraseConfig(dg.Config):
    topic: str = Field(description="an archived topic")
    key: str | None = Field(default=None, description="erase the records with this key (UTF-8)")
    keys: list[str] = Field(default=[], description="or several keys")
    keys_hex: list[str] = Field(default=[], description="keys given as hexadecimal (keys that are not text)")
    keys_base64: list[str] = Field(default=[], description="keys given as base64")
    predicate: PredicateConfig | None = Field(default=None, description="or records whose decoded field equals "
                                                                        "a value")
    dry_run: bool = Field(default=False, description="count what would be erased; write nothing")

    def request(self) -> EraseRequest:
        keys = (*(parse_key(k, "utf8") for k in [*([self.key] if self.key is not None else []), *self.keys]),
                *(parse_key(k, "hex") for k in self.keys_hex), *(parse_key(k, "base64") for k in self.keys_base64))
        p = self.predicate
        return EraseRequest(self.topic, keys, FieldEquals(p.field, parse_equals(p.equals)) if p is not None else None)


def build_erase_job(settings: Settings) -> dg.JobDefinition:
    """The `erase` job over every archive of `settings` (needs the `s3` resource, and `spark` when an archive has
    format iceberg: its erasure commits to the table)."""
    topics = sorted(t for a in settings.archives for t in a.topics)

    def erase_records(context: dg.OpExecutionContext, config: EraseConfig, s3: S3Resource,
                      spark: SparkResource | None) -> None:
        try:
            cfg = settings.archive_for(config.topic)
        except KeyError:
            raise dg.Failure(description=f"topic {config.topic!r} is not a topic of any archive; archived topics: "
                                         f"{', '.join(topics) or 'none'}") from None
        table = (TableSession(spark.session(), S3Endpoint.of_resource(s3))
                 if spark is not None and cfg.format == "iceberg" and not config.dry_run else None)
        try:
            report = traced_erase(s3.get_client(), cfg, config.request(), run_uuid(context.run_id), context.log,
                                  dry_run=config.dry_run, table=table)
        except UserError as e:
            raise dg.Failure(description=f"{type(e).__name__}: {e}") from None
        for key in report.completed:
            context.log.info(f"completed the audit record of an interrupted erasure: s3://{cfg.bucket}/{key}")
        for w in report.erased:
            context.log.info(f"window {w.window}: {w.records} record(s) "
                             + ("to erase" if config.dry_run else f"erased, generation {w.generation}"))
        context.log_event(dg.AssetObservation(asset_key=archive_asset_key(config.topic),
                                              metadata=typed(report.metadata())))

    what = dict(name="erase_records", description="Rewrite every window of the topic holding matching records "
                "without them, as a new generation of its manifest; keep an audit record.")
    if any(a.format == "iceberg" for a in settings.archives):
        @dg.op(**what)
        def _erase(context: dg.OpExecutionContext, config: EraseConfig, s3: S3Resource, spark: SparkResource) -> None:
            erase_records(context, config, s3, spark)
    else:
        @dg.op(**what)
        def _erase(context: dg.OpExecutionContext, config: EraseConfig, s3: S3Resource) -> None:
            erase_records(context, config, s3, None)

    @dg.job(name=ERASE_JOB, description="Erase records (by key, or a decoded field's value) from an archived topic "
                                        "(docs/compliance.md).")
    def _job() -> None:
        _erase()

    return _job
