"""Peer: Kafka Connect 4.1.1 standalone with Apache Iceberg's Kafka Connect sink 1.12.0 (jvm/bench-connect and
jvm/bench-iceberg), writing the topic into an Iceberg table on the same S3 (moto), with a JDBC catalog on SQLite.

Values are parsed as schemaless JSON (the sink needs a struct or map) and `KafkaMetadataTransform` adds the
record's topic, partition, offset and timestamp. The sink commits every `commit_interval_ms`; a record is visible
once a table snapshot holds it, so the run polls the catalog's current snapshot (`total-records`) until every
record is there. Steady throughput is the rate between the first and last snapshots (their `timestamp-ms`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from bench.peers.common import (
    JavaProcess,
    PeerResult,
    PeerUnavailable,
    aws_env,
    jar_dir,
    java,
    log4j2_properties,
    steady_rate,
)
from bench.under_test import LOCAL_AWS, KafkaResource, free_port

CONNECTOR = "org.apache.iceberg.connect.IcebergSinkConnector"


def _props(d: dict[str, Any]) -> str:
    return "".join(f"{k}={v}\n" for k, v in d.items())


def _snapshots(catalog_db: Path, table: str, s3: Any, bucket: str) -> list[dict[str, Any]]:
    """The table's snapshots from its current metadata file (located through the SQLite catalog); [] before the
    first commit."""
    if not catalog_db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{catalog_db}?mode=ro", uri=True, timeout=5) as db:
            row = db.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = ?",
                             (table,)).fetchone()
    except sqlite3.Error:
        return []  # not created yet, or being written
    if not row or not row[0]:
        return []
    key = row[0].split(f"{bucket}/", 1)[1]
    meta = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return meta.get("snapshots", [])


def run(*, bootstrap_servers: str, s3_endpoint_url: str, s3: Any, bucket: str, topic: str, records: int,
        workdir: Path, tag: str, commit_interval_ms: int = 5_000, tasks: int = 2,
        timeout_s: float = 1800) -> PeerResult:
    """Archive the whole `topic` (`records` records) with the Iceberg sink into s3://bucket/iceberg-<tag>/;
    return when every record is in a committed snapshot."""
    from confluent_kafka.admin import NewTopic

    connect_jars, iceberg_jars = jar_dir("bench-connect"), jar_dir("bench-iceberg")
    workdir.mkdir(parents=True, exist_ok=True)
    plugins = workdir / "plugins"
    plugins.mkdir(exist_ok=True)
    if not (plugins / "iceberg").exists():
        (plugins / "iceberg").symlink_to(iceberg_jars, target_is_directory=True)
    control = f"control-iceberg-{tag}"
    admin = KafkaResource(bootstrap_servers=bootstrap_servers).admin()
    admin.create_topics([NewTopic(control, 1, 1)])[control].result(30)
    catalog_db = workdir / f"catalog-{tag}.db"
    _create_namespace(catalog_db, "bench")
    table = f"events_{tag}".replace("-", "_")
    log = workdir / f"connect-{tag}.log"
    (workdir / "log4j2.properties").write_text(log4j2_properties(log, "INFO", kafka="org.apache.kafka:WARN",
                                                                 iceberg="org.apache.iceberg:INFO"))
    rest = f"http://127.0.0.1:{free_port()}"
    worker = workdir / "worker.properties"
    worker.write_text(_props({
        "bootstrap.servers": bootstrap_servers,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(workdir / f"offsets-{tag}"),
        "plugin.path": str(plugins),
        "listeners": rest,
    }))
    sink = workdir / f"iceberg-{tag}.properties"
    sink.write_text(_props({
        "name": f"iceberg-{tag}",
        "connector.class": CONNECTOR,
        "tasks.max": tasks,
        "topics": topic,
        "transforms": "meta",
        "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
        "iceberg.tables": f"bench.{table}",
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.tables.evolve-schema-enabled": "true",
        "iceberg.control.topic": control,
        "iceberg.control.commit.interval-ms": commit_interval_ms,
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": f"jdbc:sqlite:{catalog_db}",
        "iceberg.catalog.warehouse": f"s3://{bucket}/iceberg-{tag}",
        "iceberg.catalog.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "iceberg.catalog.s3.endpoint": s3_endpoint_url,
        "iceberg.catalog.s3.path-style-access": "true",
        "iceberg.catalog.client.region": LOCAL_AWS["AWS_REGION"],
        # the default Apache5 HTTP client is not in the AWS SDK jars fetched here
        "iceberg.catalog.http-client.type": "urlconnection",
    }))
    # S3FileIO reads the (moto) credentials from the environment: none in the properties, nor on the command line.
    env = aws_env()
    cmd = [java(), "-Xmx1g", f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
           "-cp", f"{connect_jars}/*", "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), str(sink)]
    t0, wall0 = time.monotonic(), time.time()  # snapshot times are on the wall clock
    proc = JavaProcess(cmd, workdir / f"connect-{tag}.out", env)
    try:
        snaps: list[dict[str, Any]] = []
        total = 0
        while total < records:
            if not proc.alive():
                raise PeerUnavailable(f"Kafka Connect exited with {proc.proc.returncode} before every record was "
                                      f"committed ({total} of {records}); log {log}:\n{_errors(log)}")
            if time.monotonic() - t0 > timeout_s:
                raise PeerUnavailable(f"the Iceberg sink committed {total} of {records} records in {timeout_s:.0f}s;"
                                      f" log {log}:\n{_errors(log)}")
            time.sleep(0.5)
            failed = _failed_task(rest, f"iceberg-{tag}")
            if failed:
                raise PeerUnavailable(f"a task of the Iceberg sink failed after {time.monotonic() - t0:.0f}s: "
                                      f"{failed}")
            snaps = _snapshots(catalog_db, table, s3, bucket)
            total = int(snaps[-1]["summary"].get("total-records", 0)) if snaps else 0
        visible = time.monotonic() - t0
    finally:
        proc.stop()
        admin.delete_topics([control])
    commits = [(s["timestamp-ms"] / 1000 - wall0, int(s["summary"].get("total-records", 0))) for s in snaps]
    files = sum(int(s["summary"].get("added-data-files", 0)) for s in snaps)
    written = sum(int(s["summary"].get("added-files-size", 0)) for s in snaps)
    if total != records:
        raise PeerUnavailable(f"the Iceberg table holds {total} records, expected {records}")
    return PeerResult(records=total, visible_s=visible, commits=commits, steady_records_per_s=steady_rate(commits),
                      objects=files, bytes_written=written,
                      extra={"commit_interval_ms": commit_interval_ms, "tasks": tasks, "snapshots": len(snaps)})


def _create_namespace(catalog_db: Path, namespace: str) -> None:
    """The namespace, made before the sink starts: its tasks each auto-create it at once, and on SQLite all but one
    fail on the primary key. The table and row are JdbcCatalog's own (its namespace marker `exists=true`)."""
    with sqlite3.connect(catalog_db) as db:
        db.execute("CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, "
                   "namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255), property_value VARCHAR(1000), "
                   "PRIMARY KEY (catalog_name, namespace, property_key))")
        db.execute("INSERT OR IGNORE INTO iceberg_namespace_properties VALUES ('iceberg', ?, 'exists', 'true')",
                   (namespace,))


def _failed_task(rest: str, connector: str) -> str | None:
    """The trace of a FAILED task of the connector (Connect's REST API), None while none failed or the worker is
    still starting."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{rest}/connectors/{connector}/status", timeout=2) as r:
            status = json.loads(r.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    for t in status.get("tasks", []):
        if t.get("state") == "FAILED":
            trace = t.get("trace", "").splitlines()
            causes = [ln for ln in trace if ln.startswith("Caused by")]
            return "; ".join((trace[:1] + causes[-2:]))[:1500]
    return None


def _errors(log: Path, lines: int = 12) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    errs = [ln for ln in text if " ERROR " in ln or "Exception" in ln]
    return "\n".join((errs or text)[-lines:])
