"""io/lineage.py: when lineage is on, the events it builds (validated against the OpenLineage spec's schema), the
datasets' names, and that a failing transport never fails the run."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
from openlineage.client.serde import Serde

from s3_archive.io.lineage import (
    PRODUCER,
    ErasedWindow,
    LineageRun,
    WindowRange,
    build_event,
    glue_account,
    glue_dataset,
    kafka_dataset,
    lineage_enabled,
    lineage_run,
    run_uuid,
    s3_dataset,
    spark_columns,
)
from s3_archive_tests.lineage_events import read_events, validate_event

WINDOW = WindowRange("p00002-000000000100-000000000200", 2, 100, 200, 100)


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: str) -> None:
        self.warnings.append(msg)


def _event(event_type: str, error: BaseException | None = None) -> dict:
    run = LineageRun("archive.orders.orders", "ARCHIVE", str(uuid.uuid4()),
                     [kafka_dataset("broker-1:9092,broker-2:9092", "orders", [WINDOW]).counted(100, 4096)],
                     [s3_dataset("lake", "raw/orders/", [WINDOW]).counted(100, 2048, 1)])
    run.outputs[0] = replace(run.outputs[0], columns=(("key", "binary"),), table=("iceberg:glue", "db.orders"))
    return json.loads(Serde.to_json(build_event(event_type, run, error)))


@pytest.mark.parametrize("event_type", ["START", "COMPLETE", "FAIL"])
def test_events_validate_against_the_openlineage_schema(event_type):
    event = _event(event_type, ValueError("bad window") if event_type == "FAIL" else None)
    validate_event(event)
    assert event["eventType"] == event_type
    [source], [target] = event["inputs"], event["outputs"]
    assert (source["namespace"], source["name"]) == ("kafka://broker-1:9092", "orders")
    assert (target["namespace"], target["name"]) == ("s3://lake", "raw/orders")
    assert source["inputFacets"]["s3archive_windows"]["windows"] == [
        {"key": WINDOW.key, "partition": 2, "startOffset": 100, "endOffset": 200, "records": 100}]
    assert target["outputFacets"]["outputStatistics"].items() >= {"rowCount": 100, "size": 2048, "fileCount": 1}.items()
    assert [(f["name"], f["type"]) for f in target["facets"]["schema"]["fields"]] == [("key", "binary")]
    assert target["facets"]["symlinks"]["identifiers"][0]["name"] == "db.orders"
    assert ("errorMessage" in event["run"]["facets"]) == (event_type == "FAIL")


def test_a_facet_that_breaks_its_schema_is_refused():
    event = _event("COMPLETE")
    event["inputs"][0]["inputFacets"]["s3archive_windows"]["windows"][0]["startOffset"] = "100"
    with pytest.raises(Exception, match="is not of type 'integer'"):
        validate_event(event)


def test_dataset_names_follow_the_naming_spec():
    assert kafka_dataset("SASL_SSL://b1:9093", "t").namespace == "kafka://b1:9093"
    assert (s3_dataset("b", "").name, s3_dataset("b", "p/t/").name) == ("/", "p/t")
    d = glue_dataset("eu-west-1", "123456789012", "db", "tbl")
    assert (d.namespace, d.name) == ("arn:aws:glue:eu-west-1:123456789012", "table/db/tbl")
    assert spark_columns('{"type":"struct","fields":[{"name":"k","type":"binary","nullable":true,"metadata":{}},'
                         '{"name":"h","type":{"type":"array","elementType":"string"},"nullable":true}]}') == (
        ("k", "binary"), ("h", "array"))
    assert spark_columns("not json") == ()


def test_off_unless_openlineage_is_configured():
    assert not lineage_enabled({})
    assert lineage_enabled({"OPENLINEAGE__TRANSPORT__TYPE": "console"})
    assert lineage_enabled({"OPENLINEAGE_URL": "http://marquez:5000"})
    assert not lineage_enabled({"OPENLINEAGE_URL": "http://marquez:5000", "OPENLINEAGE_DISABLED": "true"})


def test_run_ids_are_uuids_and_a_retry_is_a_run_of_its_own():
    rid = str(uuid.uuid4())
    assert run_uuid(rid) == rid
    assert run_uuid(rid, 1) != rid and uuid.UUID(run_uuid(rid, 1))
    assert uuid.UUID(run_uuid("not-a-uuid"))


def test_start_and_complete_or_fail_through_the_file_transport(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(path))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    log = Log()
    with lineage_run("restore.t", "RESTORE", str(uuid.uuid4()), [], [], log) as run:
        run.outputs = [kafka_dataset("k:1", "t2", [WINDOW]).counted(3, 30)]
    with pytest.raises(RuntimeError), lineage_run("restore.t", "RESTORE", str(uuid.uuid4()), [], [], log):
        raise RuntimeError("target gone")
    events = read_events(path)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "FAIL"]
    assert events[1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 3
    assert "RuntimeError: target gone" in events[3]["run"]["facets"]["errorMessage"]["message"]
    for e in events:
        validate_event(e)
    assert log.warnings == []


def test_a_failing_transport_is_a_warning_without_its_secret(monkeypatch):
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__AUTH__TYPE", "api_key")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__AUTH__APIKEY", "s3cr3t-lineage-key")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TIMEOUT", "1")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__RETRY__TOTAL", "0")
    log = Log()
    with lineage_run("archive.a.t", "ARCHIVE", str(uuid.uuid4()), [], [], log) as run:
        run.outputs = []
    assert len(log.warnings) == 2 and all("not sent" in w for w in log.warnings)
    assert not any("s3cr3t" in w or "127.0.0.1" in w for w in log.warnings)


def test_the_glue_account_is_asked_only_when_lineage_is_on_and_a_failure_is_a_warning(monkeypatch):
    def fails() -> tuple[str, str]:
        raise RuntimeError("no STS here")

    log = Log()
    assert glue_account(fails, log) is None and log.warnings == []  # off: not asked
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "console")
    assert glue_account(lambda: ("eu-west-1", "123456789012"), log) == ("eu-west-1", "123456789012")
    assert glue_account(fails, log) is None
    assert log.warnings == ["OpenLineage: the Glue catalog's account id is not known (RuntimeError: no STS here); "
                            "this run's lineage names no Glue table (docs/lineage.md)"]


def test_the_erasure_facet_validates_and_carries_no_key():
    erased = (ErasedWindow("p00000-000000000000-000000000010", 2, 3),)
    run = LineageRun("erase.orders.orders", "ERASE", str(uuid.uuid4()), [s3_dataset("lake", "raw/orders")],
                     [replace(s3_dataset("lake", "raw/orders"), erased=erased)])
    event = json.loads(Serde.to_json(build_event("COMPLETE", run)))
    validate_event(event)
    assert event["outputs"][0]["outputFacets"]["s3archive_erasure"] == {
        "_producer": PRODUCER, "_schemaURL": "urn:s3-archive:lineage-facets:1#/$defs/ErasureOutputDatasetFacet",
        "records": 3, "windows": [{"key": "p00000-000000000000-000000000010", "generation": 2, "records": 3}]}
    event["outputs"][0]["outputFacets"]["s3archive_erasure"]["windows"][0]["subject"] = "customer-4711"
    with pytest.raises(Exception, match="Additional properties are not allowed"):
        validate_event(event)
