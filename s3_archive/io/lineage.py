"""OpenLineage RunEvents of the runs (docs/lineage.md): one START, then one COMPLETE or FAIL, per run attempt.

Every run that moves data calls `lineage_run` around its work: the archive (Kafka topic → S3 location), the
restore (S3 location → Kafka topic), and any other job with its datasets. Off unless OpenLineage's own
configuration is set in the environment (`OPENLINEAGE_URL`, `OPENLINEAGE_CONFIG` or `OPENLINEAGE__TRANSPORT__…`:
http, file, console, or any transport of openlineage-python); `OPENLINEAGE_DISABLED=true` turns it off again.
Emitting never fails a run: a transport's error is logged as a warning, without its URL or credentials.
Datasets are named as OpenLineage's naming spec says: `kafka://host:port` + topic, `s3://bucket` + path,
`arn:aws:glue:region:account` + `table/db/table`. openlineage-python is imported only when lineage is on.
"""

from __future__ import annotations

import json
import os
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal, Protocol

NAMESPACE_ENV = "S3_ARCHIVE_LINEAGE_NAMESPACE"  # the jobs' namespace; default "s3-archive"
PRODUCER = f"urn:s3-archive:{version('s3-archive')}"  # no public URL to name: a URN is a URI
FACETS_SCHEMA = Path(__file__).with_name("lineage_facets.json")  # the custom facets' JSON schema, shipped
JobType = Literal["ARCHIVE", "RESTORE", "CATALOG", "ERASE"]


class WarnLog(Protocol):
    def warning(self, msg: str) -> None: ...


def lineage_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether OpenLineage's configuration is present in `env` (default: the process's) and not disabled."""
    env = os.environ if env is None else env
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OPENLINEAGE_URL") or env.get("OPENLINEAGE_CONFIG")
                or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in env))


@dataclass(frozen=True)
class WindowRange:
    """One offset window a run read or wrote: `[start, end)` of `partition`, its key, its records."""

    key: str
    partition: int
    start: int
    end: int
    records: int | None = None  # None: not known (yet)


@dataclass(frozen=True)
class ErasedWindow:
    """One window an erasure rewrote: its key, the manifest generation it committed, the records it erased."""

    key: str
    generation: int
    records: int


@dataclass(frozen=True)
class LineageDataset:
    """A dataset as OpenLineage names it, with what the run knows of it (plain values, built into facets at
    emission): its windows, records, bytes and objects, its columns, and a symlink (an Iceberg table's
    catalog name)."""

    namespace: str
    name: str
    windows: tuple[WindowRange, ...] = ()
    records: int | None = None
    bytes: int | None = None
    objects: int | None = None
    columns: tuple[tuple[str, str], ...] = ()  # (name, type) of the stored columns
    table: tuple[str, str] | None = None  # (namespace, name) of the same data as a catalog table
    erased: tuple[ErasedWindow, ...] | None = None  # an erasure's windows rewritten; None: not an erasure's output

    def counted(self, records: int, size: int | None = None, objects: int | None = None) -> LineageDataset:
        return replace(self, records=records, bytes=size, objects=objects)


def kafka_dataset(bootstrap_servers: str, topic: str, windows: Sequence[WindowRange] = ()) -> LineageDataset:
    """A Kafka topic: namespace `kafka://<first bootstrap server>` (the naming spec's host:port)."""
    first = bootstrap_servers.split(",")[0].strip()
    first = first.split("://", 1)[-1]  # a listener name or scheme before the host is not part of the name
    return LineageDataset(f"kafka://{first}", topic, tuple(windows))


def s3_dataset(bucket: str, path: str, windows: Sequence[WindowRange] = ()) -> LineageDataset:
    """An S3 location: namespace `s3://<bucket>`, name the path (a topic's folder, no trailing slash)."""
    return LineageDataset(f"s3://{bucket}", path.strip("/") or "/", tuple(windows))


def glue_dataset(region: str, account: str, database: str, table: str) -> LineageDataset:
    """A Glue table: namespace `arn:aws:glue:<region>:<account id>`, name `table/<database>/<table>`."""
    return LineageDataset(*glue_table_name(region, account, database, table))


def glue_table_name(region: str, account: str, database: str, table: str) -> tuple[str, str]:
    """(namespace, name) of a Glue table, as OpenLineage's naming spec names it."""
    return f"arn:aws:glue:{region}:{account}", f"table/{database}/{table}"


def glue_account(ask: Callable[[], tuple[str, str]], log: WarnLog) -> tuple[str, str] | None:
    """(region, account id) of the Glue catalog when lineage is on (`ask`: e.g. `S3Resource.glue_account`); None
    when it is off, or when `ask` fails (a warning: the run's lineage then names no Glue table)."""
    if not lineage_enabled():
        return None
    try:
        return ask()
    except Exception as e:  # noqa: BLE001 - lineage must never fail the run it describes
        log.warning(f"OpenLineage: the Glue catalog's account id is not known ({type(e).__name__}: {e}); this run's "
                    "lineage names no Glue table (docs/lineage.md)")
        return None


def spark_columns(schema_json: str) -> tuple[tuple[str, str], ...]:
    """A Spark schema (its JSON, as a manifest keeps it) as (name, type) pairs; nested types by their kind."""
    try:
        fields = json.loads(schema_json).get("fields", [])
    except (ValueError, AttributeError):
        return ()
    return tuple((f["name"], f["type"] if isinstance(f["type"], str) else f["type"].get("type", "struct"))
                 for f in fields if isinstance(f, dict) and "name" in f and "type" in f)


@dataclass
class LineageRun:
    """What a run says about its datasets: set `inputs` and `outputs` as the run learns their counts; they are
    sent with COMPLETE (or FAIL)."""

    job: str
    job_type: JobType
    run_id: str
    inputs: list[LineageDataset] = field(default_factory=list)
    outputs: list[LineageDataset] = field(default_factory=list)


def run_uuid(dagster_run_id: str, retry: int = 0) -> str:
    """The OpenLineage runId of a Dagster run's attempt: the run's id, or for a step retry an id derived from it
    (the spec wants one START and one end per run)."""
    base = uuid.UUID(dagster_run_id) if _is_uuid(dagster_run_id) else uuid.uuid5(uuid.NAMESPACE_URL, dagster_run_id)
    return str(base if retry == 0 else uuid.uuid5(base, f"retry {retry}"))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


@contextmanager
def lineage_run(job: str, job_type: JobType, run_id: str, inputs: Sequence[LineageDataset],
                outputs: Sequence[LineageDataset], log: WarnLog) -> Iterator[LineageRun]:
    """START now; COMPLETE when the block ends, FAIL (with the error) when it raises. Does nothing when lineage is
    off. `job`: the job's name (e.g. `archive.orders.orders-topic`), in the namespace `$S3_ARCHIVE_LINEAGE_NAMESPACE`
    (default `s3-archive`)."""
    run = LineageRun(job, job_type, run_id, list(inputs), list(outputs))
    if not lineage_enabled():
        yield run
        return
    emit_event("START", run, log)
    try:
        yield run
    except BaseException as e:
        emit_event("FAIL", run, log, error=e)
        raise
    emit_event("COMPLETE", run, log)


def emit_event(event_type: Literal["START", "COMPLETE", "FAIL"], run: LineageRun, log: WarnLog,
               error: BaseException | None = None) -> None:
    """One RunEvent through the configured transport; a failure to emit is a warning, never the run's error."""
    try:
        from openlineage.client import OpenLineageClient

        OpenLineageClient().emit(build_event(event_type, run, error))
    except Exception as e:  # noqa: BLE001 - lineage must never fail the run it describes
        log.warning(f"OpenLineage {event_type} event of {run.job} not sent: {type(e).__name__} (the transport "
                    "configured by OPENLINEAGE_*; docs/lineage.md)")


def build_event(event_type: str, run: LineageRun, error: BaseException | None = None) -> Any:
    """The RunEvent (openlineage-python's `event_v2.RunEvent`); pure."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import error_message_run, job_type_job, processing_engine_run

    run_facets: dict[str, Any] = {"processing_engine": processing_engine_run.ProcessingEngineRunFacet(
        version=version("s3-archive"), name="s3-archive", openlineageAdapterVersion=version("openlineage-python"),
        producer=PRODUCER)}
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=f"{type(error).__name__}: {error}", programmingLanguage="python",
            stackTrace="".join(traceback.format_exception(error)), producer=PRODUCER)
    job_facets = {"jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="S3_ARCHIVE",
                                                          jobType=run.job_type, producer=PRODUCER)}
    inputs = [InputDataset(namespace=d.namespace, name=d.name, facets=_dataset_facets(d),
                           inputFacets=_input_facets(d)) for d in run.inputs]
    outputs = [OutputDataset(namespace=d.namespace, name=d.name, facets=_dataset_facets(d),
                             outputFacets=_output_facets(d)) for d in run.outputs]
    return RunEvent(eventType=RunState(event_type), eventTime=datetime.now(UTC).isoformat(),
                    run=Run(runId=run.run_id, facets=run_facets),
                    job=Job(namespace=os.environ.get(NAMESPACE_ENV, "s3-archive"), name=run.job, facets=job_facets),
                    inputs=inputs, outputs=outputs, producer=PRODUCER)


def _dataset_facets(d: LineageDataset) -> dict[str, Any]:
    from openlineage.client.facet_v2 import schema_dataset, symlinks_dataset

    facets: dict[str, Any] = {}
    if d.columns:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in d.columns],
            producer=PRODUCER)
    if d.table is not None:
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
            identifiers=[symlinks_dataset.Identifier(namespace=d.table[0], name=d.table[1], type="TABLE")],
            producer=PRODUCER)
    return facets


def _input_facets(d: LineageDataset) -> dict[str, Any]:
    from openlineage.client.facet_v2 import input_statistics_input_dataset

    facets = _window_facet(d, "input")
    if d.records is not None:
        facets["inputStatistics"] = input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
            rowCount=d.records, size=d.bytes, fileCount=d.objects, producer=PRODUCER)
    return facets


def _output_facets(d: LineageDataset) -> dict[str, Any]:
    from openlineage.client.facet_v2 import output_statistics_output_dataset

    facets = _window_facet(d, "output")
    if d.erased is not None:
        from s3_archive.io.lineage_facets import ErasedWindowFacet, ErasureOutputDatasetFacet

        facets["s3archive_erasure"] = ErasureOutputDatasetFacet(
            records=sum(w.records for w in d.erased),
            windows=[ErasedWindowFacet(w.key, w.generation, w.records) for w in d.erased], producer=PRODUCER)
    if d.records is not None:
        facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=d.records, size=d.bytes, fileCount=d.objects, producer=PRODUCER)
    return facets


def _window_facet(d: LineageDataset, kind: Literal["input", "output"]) -> dict[str, Any]:
    """`s3archive_windows`: the offset windows of the dataset this run read or wrote (io/lineage_facets.py)."""
    if not d.windows:
        return {}
    from s3_archive.io.lineage_facets import Window, WindowsInputDatasetFacet, WindowsOutputDatasetFacet

    cls = WindowsInputDatasetFacet if kind == "input" else WindowsOutputDatasetFacet
    windows = [Window(w.key, w.partition, w.start, w.end, w.records) for w in d.windows]
    return {"s3archive_windows": cls(windows=windows, producer=PRODUCER)}
