"""The deployed shape: Dagster on PostgreSQL (deploy/dagster.postgres.yaml) with the queued run coordinator, and
`dagster-daemon` + `dagster-webserver` as separate processes, driven over GraphQL like the UI: a sensor-launched
archive and a backfill, checked in S3.

The backfill daemon evaluates backfills every 30 s from its start, a period Dagster does not let an instance set: the
UI backfill is launched on the webserver before the daemon starts, and checked by the module's last test, so that its
two daemon iterations (the first as the daemon starts) pass while the other tests run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from s3_archive.defs.archive.sensors import TOPIC_TAG
from s3_archive.local.processes import free_port, spawn, stop_pid, wait_until
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.e2e.dagster_graphql import graphql, launch_backfill
from s3_archive_tests.integration.archive_helpers import archive_config, archived_records, manifest
from s3_archive_tests.kafka_helpers import create_topic, produce

REPO = Path(__file__).resolve().parents[2]
DATABASE = "e2e_deployed"
BIN_DIR = Path(sys.executable).parent  # the venv's console scripts, as a deployment runs them


@dataclass
class Webserver:
    """The deployment's webserver, up, on the instance of $DAGSTER_HOME (its daemon not started yet)."""

    root: Path
    url: str
    home: Path
    env: dict[str, str]
    workspace: list[str]
    sensed: str
    filled: str


@pytest.fixture(scope="module")
def webserver(services, kafka, postgres, tmp_path_factory) -> Iterator[Webserver]:
    root = tmp_path_factory.mktemp("deployed")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
    postgres.create_database(DATABASE)
    sensed = create_topic(kafka, f"deployed-sensed-{os.getpid()}", partitions=2)
    filled = create_topic(kafka, f"deployed-backfill-{os.getpid()}")
    config = root / "archives.yaml"
    config.write_text(f"""archives:
  - {{name: deployed_sensed, topics: [{sensed}], bucket: {services.bucket}, prefix: deployed-sensed/,
     flush: {{count: 40, interval_seconds: null}}, windows_per_run: 2, sensor_interval_seconds: 5}}
  - {{name: deployed_backfill, topics: [{filled}], bucket: {services.bucket}, prefix: deployed-backfill/,
     sensor_default: stopped}}
""")
    env = {**os.environ, **services.env(), **postgres.env(), "DAGSTER_PG_DB": DATABASE, "DAGSTER_HOME": str(home),
           "S3_ARCHIVE_CONFIG": str(config), "S3_ARCHIVE_ENV": "local", "S3_ARCHIVE_STATE_DIR": str(root / "state")}
    port = free_port()
    workspace = ["-w", str(REPO / "workspace.yaml")]
    # Two processes, as deployed (not `dagster dev`): the webserver serves the UI's GraphQL; the daemon (`deployed`)
    # runs sensors and backfills and dequeues runs. Both read the instance from $DAGSTER_HOME/dagster.yaml.
    web = spawn([str(BIN_DIR / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), *workspace],
                root / "webserver.log", env=env)
    url = f"http://127.0.0.1:{port}"
    # This process opens the same instance (to add partitions as a user would): it needs the same variables.
    saved = {k: os.environ.get(k) for k in env if k.startswith("DAGSTER_PG_")}
    os.environ.update({k: env[k] for k in saved})
    try:
        def up() -> bool:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                return True
        wait_until(up, 180, web, "dagster-webserver", root / "webserver.log")
        yield Webserver(root, url, home, env, workspace, sensed, filled)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        stop_pid(web.pid)
        _print_tail(root / "webserver.log")


@pytest.fixture(scope="module")
def ui_backfill(webserver: Webserver, kafka) -> tuple[str, list, list[OffsetWindow]]:
    """The UI backfill over three windows, launched before the daemon starts: the daemon's first backfill iteration
    (as it starts) requests its run and the next (30 s later) marks it completed, while the other tests run. Its id,
    the records, the windows; checked by the module's last test."""
    topic = webserver.filled
    produced = produce(kafka, topic, [(0, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(30)])
    windows = [OffsetWindow(0, s, s + 10) for s in (0, 10, 20)]
    return launch_backfill(webserver.url, webserver.home, topic, windows), produced, windows


@pytest.fixture(scope="module")
def deployed(webserver: Webserver, ui_backfill, postgres):
    w = webserver
    daemon = spawn([str(BIN_DIR / "dagster-daemon"), "run", *w.workspace], w.root / "daemon.log", env=w.env)
    try:
        assert daemon.poll() is None, (w.root / "daemon.log").read_text()[-3000:]
        yield w.url, w.home, w.env, w.sensed, w.filled, postgres, daemon
    finally:
        stop_pid(daemon.pid)
        _print_tail(w.root / "daemon.log")


def _print_tail(log: Path) -> None:
    print(f"--- {log.name} (tail)\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:]))


def runs(url: str) -> list[dict]:
    data = graphql(url, """{ runsOrError(limit: 100) { ... on Runs { results {
        runId status tags { key value } } } } }""")
    return data["runsOrError"]["results"]


def test_the_instance_is_postgres_with_queued_runs_and_a_healthy_daemon(deployed):
    url, home, _, _, _, postgres, _ = deployed
    info = graphql(url, """{ instance { runLauncher { name } runQueuingSupported
        runQueueConfig { maxConcurrentRuns tagConcurrencyLimitsYaml }
        daemonHealth { allDaemonStatuses { daemonType healthy required } } } }""")["instance"]
    assert info["runQueuingSupported"] and info["runQueueConfig"]["maxConcurrentRuns"] == 4
    assert "s3_archive/topic" in info["runQueueConfig"]["tagConcurrencyLimitsYaml"]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
    deadline = time.monotonic() + 120
    while True:  # the daemon reports its heartbeats through the shared instance
        statuses = graphql(url, "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }")
        required = [s for s in statuses["instance"]["daemonHealth"]["allDaemonStatuses"] if s["required"]]
        if required and all(s["healthy"] for s in required):
            break
        assert time.monotonic() < deadline, f"the daemon is not healthy: {required}"
        time.sleep(1)
    assert {"SENSOR", "SCHEDULER", "QUEUED_RUN_COORDINATOR"} <= {s["daemonType"] for s in required}
    # The database password is given through the environment only, never on a command line.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert postgres.password not in ps


def test_a_deployed_archive_archives_with_no_human_step_through_the_queue(deployed, kafka, s3, services):
    url, _, _, topic, _, _, daemon = deployed
    produced = produce(kafka, topic, [(i % 2, None, f"v{i}".encode(), []) for i in range(160)])  # 80 per partition
    # No one turns the sensor on: a deployed archive runs from the start (sensor_default: running)
    sensor = {"repositoryLocationName": "s3_archive", "repositoryName": "__repository__"}
    states = {name: graphql(url, """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
        __typename ... on Sensor { sensorState { status } } } }""", {"s": {**sensor, "sensorName": name}}
                            )["sensorOrError"]["sensorState"]["status"]
              for name in ("archive_deployed_sensed_offsets", "archive_deployed_backfill_offsets")}
    assert states == {"archive_deployed_sensed_offsets": "RUNNING", "archive_deployed_backfill_offsets": "STOPPED"}

    cfg = archive_config(services.bucket, topic, "deployed-sensed/")
    windows = [OffsetWindow(p, s, s + 40) for p in (0, 1) for s in (0, 40)]
    deadline = time.monotonic() + 420
    while not all(manifest(s3, cfg, topic, w) for w in windows):
        assert daemon.poll() is None, "the daemon exited"
        assert time.monotonic() < deadline, "the sensor's runs did not archive the windows within 420 s"
        time.sleep(1)
    assert archived_records(s3, cfg, topic) == produced
    # A run's last window is committed a moment before the run itself ends: wait for both runs to end.
    while True:
        mine = [r for r in runs(url) if {"key": TOPIC_TAG, "value": topic} in r["tags"]]
        if mine and not {r["status"] for r in mine} & {"QUEUED", "NOT_STARTED", "STARTING", "STARTED"}:
            break
        assert time.monotonic() < deadline, f"the sensor's runs did not end within 420 s: {mine}"
        time.sleep(1)
    assert len(mine) == 2 and {r["status"] for r in mine} == {"SUCCESS"}  # windows_per_run 2, one topic at a time


def test_a_ui_backfill_runs_through_the_queue(deployed, ui_backfill, s3, services):
    """Last in the module: its backfill (`ui_backfill`) was launched before the daemon started."""
    url, _, _, _, topic, _, daemon = deployed
    backfill_id, produced, windows = ui_backfill
    deadline = time.monotonic() + 420
    while True:
        status = graphql(url, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
            ... on PartitionBackfill { status runs { status tags { key value } } } } }""",
                         {"id": backfill_id})["partitionBackfillOrError"]
        if status["status"] not in ("REQUESTED",):
            break
        assert daemon.poll() is None, "the daemon exited"
        assert time.monotonic() < deadline, "the backfill did not finish within 420 s"
        time.sleep(1)
    assert status["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), status
    (run,) = status["runs"]  # three windows, one run (windows_per_run 100)
    assert run["status"] == "SUCCESS" and any(t["key"] == "dagster/backfill" for t in run["tags"])
    cfg = archive_config(services.bucket, topic, "deployed-backfill/")
    assert all(manifest(s3, cfg, topic, w) for w in windows)
    assert archived_records(s3, cfg, topic) == produced
