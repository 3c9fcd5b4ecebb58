"""The product as users run it: `dagster dev` (webserver + daemon) and a UI-style backfill over GraphQL; sensors
that archive through an S3 outage and pick up a new topic with no one touching anything.

S3 is reached through the session's fault proxy (no faults but in the outage test), with one SDK retry only, so that
an outage reaches the runs and their retries instead of being ridden out by the SDK.

The test instance is the demo's (dagster.yaml) with the run queue looked at every second, and the sensors the tests
wait for are evaluated every 5 s (the least `sensor_interval_seconds` and `topic_discovery.interval_seconds` allow):
the tests wait for what the daemon does, not for its timers. The backfill daemon evaluates backfills every 30 s, a
period Dagster does not let an instance set: the UI backfill is launched as the module starts and checked by the
module's last test, so that its two daemon iterations pass while the other tests run. So are the sensor's rests, cut at
the next minute's cron tick: produced as the sensor test ends, checked after the four tests that follow it. The S3
outage comes after that check, so that only its own runs meet it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import dagster as dg
import pytest
import yaml

from s3_archive.catalog.tables import table_name
from s3_archive.config.catalog import DEFAULT_DATABASE
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.metadata import PLOT_KEYS
from s3_archive.local.fault_proxy import FaultRule
from s3_archive.local.processes import free_port
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.e2e.dagster_graphql import archive_assets, graphql, launch_backfill, sensor_ticks, start_sensor
from s3_archive_tests.integration.archive_helpers import archive_config, archived_records, manifest
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce
from s3_archive_tests.manifests import put_jsonl_window

REPO = Path(__file__).resolve().parents[2]


def refresh_topics_cli(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "s3_archive.cli", "refresh-topics"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def restore_source() -> str:
    """The source topic of the e2e archive with a declared restore target (windows committed by hand)."""
    return f"e2e-rs-{os.getpid()}"


def outage_topic() -> str:
    return f"e2e-outage-{os.getpid()}"


def killed_topic() -> str:
    """The topic of the e2e archive whose first run's whole process tree is killed."""
    return f"e2e-killed-{os.getpid()}"


def follow_source() -> str:
    """The source topic of the e2e archive with a `mode: follow` restore target (windows committed by hand)."""
    return f"e2e-fw-{os.getpid()}"


DISCOVERY_S = 5  # the test instance's topic discovery interval (the least it can be)


@pytest.fixture(scope="module")
def dagster_dev(services, kafka, fault_proxy, tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    home = root / "dagster_home"
    home.mkdir()
    # The demo's instance, its run queue looked at every second (Dagster's default: every 5 s), as
    # deploy/dagster.postgres.yaml's is: a run a sensor or the UI requests starts up to 4 s sooner.
    instance_yaml = yaml.safe_load((REPO / "dagster.yaml").read_text())
    instance_yaml["run_queue"]["dequeue_interval_seconds"] = 1
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml))
    topic = create_topic(kafka, f"e2e-{os.getpid()}")
    sensed = create_topic(kafka, f"e2e-sensed-{os.getpid()}", partitions=2)
    pattern = f"e2e-pat-{os.getpid()}"
    create_topic(kafka, f"{pattern}.a")
    create_topic(kafka, restore_source(), partitions=2)
    create_topic(kafka, outage_topic(), partitions=2)
    create_topic(kafka, killed_topic())
    create_topic(kafka, follow_source(), partitions=2)
    create_topic(kafka, f"{follow_source()}.mirror", partitions=2)
    config = root / "archives.yaml"
    # Each archive's sensor waits for its test to turn it on (sensor_default: stopped), as each test sets up first.
    config.write_text(json.dumps({"topic_discovery": {"interval_seconds": DISCOVERY_S}, "archives": [
        {**a, "sensor_default": "stopped"} for a in [
        {"name": "e2e", "topics": [topic], "bucket": services.bucket, "prefix": "e2e/", "flush": {"count": 50}},
        # Every minute, the sensor also cuts every partition's rest (a cron tick, gated by its cursor).
        {"name": "e2e_sensed", "topics": [sensed], "bucket": services.bucket, "prefix": "e2e-sensed/",
         "flush": {"count": 40, "interval_seconds": 3600}, "schedule_cron": "* * * * *", "sensor_interval_seconds": 5},
        {"name": "e2e_pattern", "topic_pattern": rf"{pattern}\..*", "bucket": services.bucket,
         "prefix": "e2e-pattern/", "flush": {"count": 5, "interval_seconds": None}, "sensor_interval_seconds": 5},
        # Sensor-driven archiving through an S3 outage: short sensor interval and backoff for the test.
        {"name": "e2e_outage", "topics": [outage_topic()], "bucket": services.bucket, "prefix": "e2e-outage/",
         "flush": {"count": 20, "interval_seconds": None}, "windows_per_run": 2, "sensor_interval_seconds": 5,
         "retries": {"max": 3, "backoff_seconds": 5, "reruns": 3}},
        # A run killed with its whole process tree: no step retry, the sensor requests its windows again 2 s later.
        {"name": "e2e_killed", "topics": [killed_topic()], "bucket": services.bucket, "prefix": "e2e-killed/",
         "flush": {"count": 20, "interval_seconds": None}, "windows_per_run": 4, "sensor_interval_seconds": 5,
         "retries": {"max": 0, "backoff_seconds": 2, "reruns": 2}},
        # A restore the UI launches over selected windows with no run config.
        {"name": "e2e_restore", "topics": [restore_source()], "bucket": services.bucket, "prefix": "e2e-restore/",
         "format": "jsonl", "restore_targets": [{"name": "ui", "target_topic": "{topic}.ui"}]},
        # A restore that follows the archive: its sensor runs from the start, every 5 s (the archive's interval).
        {"name": "e2e_follow", "topics": [follow_source()], "bucket": services.bucket, "prefix": "e2e-follow/",
         "format": "jsonl", "sensor_interval_seconds": 5,
         "restore_targets": [{"name": "mirror", "target_topic": "{topic}.mirror", "mode": "follow"}]},
    ]]}))
    port = free_port()
    env = {**os.environ, **services.env(), "DAGSTER_HOME": str(home), "S3_ARCHIVE_CONFIG": str(config),
           "S3_ARCHIVE_STATE_DIR": str(root / "state"), "S3_ARCHIVE_S3_ENDPOINT_URL": fault_proxy.endpoint_url,
           "S3_ARCHIVE_S3_MAX_ATTEMPTS": "1", "S3_ARCHIVE_DAGSTER_URL": f"http://127.0.0.1:{port}"}
    # As the demo does: the topics of the pattern are known before the code location loads.
    refresh_topics_cli(env)
    log = open(root / "dagster-dev.log", "wb")
    # SIGINT stops it as Ctrl-C does: a runner started in the background ignores SIGINT, and dagster dev would
    # inherit that and wait out the SIGKILL below.
    proc = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(port),
                             "-w", str(REPO / "workspace.yaml")], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (root / "dagster-dev.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "dagster dev did not come up in 180s"
                time.sleep(0.25)
        yield url, home, topic, sensed, env, pattern
    finally:
        # dagster dev shuts its webserver and daemon down cleanly on SIGINT; SIGKILL only what lingers.
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(wait)
                break
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
        log.close()


@pytest.fixture(scope="module", autouse=True)
def ui_backfill(dagster_dev, kafka) -> tuple[str, list, list[OffsetWindow]]:
    """The UI backfill over three windows, launched as the module starts (the backfill daemon requests its run at
    its next iteration and marks it completed at the one after, 30 s apart): its id, the records, the windows.
    Checked by the module's last test."""
    url, home, topic, *_ = dagster_dev
    produced = produce(kafka, topic, [(0, f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode())])
                                      for i in range(150)])
    windows = [OffsetWindow(0, s, s + 50) for s in (0, 50, 100)]
    return launch_backfill(url, home, topic, windows), produced, windows


@pytest.fixture(scope="module")
def sensed() -> dict:
    """What the sensor test leaves to a later test of the module: every record it produced, rests included."""
    return {}


def test_sensor_turned_on_archives_new_records_with_no_manual_step(dagster_dev, kafka, s3, services, sensed):
    url, _, _, topic, *_ = dagster_dev
    produced = produce(kafka, topic, [(i % 2, None, f"v{i}".encode(), []) for i in range(160)])  # 80 per partition
    started = graphql(url, """
        mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
          __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }""",
                      {"s": {"repositoryLocationName": "s3_archive", "repositoryName": "__repository__",
                             "sensorName": "archive_e2e_sensed_offsets"}})["startSensor"]
    assert started["__typename"] == "Sensor" and started["sensorState"]["status"] == "RUNNING", started

    cfg = archive_config(services.bucket, topic, "e2e-sensed/")
    windows = [OffsetWindow(p, s, s + 40) for p in (0, 1) for s in (0, 40)]
    deadline = time.monotonic() + 420
    while not all(manifest(s3, cfg, topic, w) for w in windows):
        assert time.monotonic() < deadline, "the sensor did not archive the new windows within 420 s"
        time.sleep(1)
    assert archived_records(s3, cfg, topic) == produced

    # Rests younger than flush.interval_seconds: cut at the next cron tick of schedule_cron, by the same sensor.
    # Checked by test_the_sensors_rests_..., later in the module: the wait for the next minute passes meanwhile.
    rests = produce(kafka, topic, [(i % 2, None, f"r{i}".encode(), []) for i in range(6)])
    sensed["produced"] = sorted(produced + rests, key=lambda r: (r.partition, r.offset))


def test_a_topic_created_while_the_daemon_runs_is_archived_within_two_discovery_ticks(dagster_dev, kafka, s3,
                                                                                        services):
    url, _, _, _, env, pattern = dagster_dev
    assert f"{pattern}.a" in archive_assets(url)
    sensors = graphql(url, """{ sensorsOrError(repositorySelector: {repositoryLocationName: "s3_archive",
        repositoryName: "__repository__"}) { ... on Sensors { results { name sensorState { status } } } } }""")
    status = {s["name"]: s["sensorState"]["status"] for s in sensors["sensorsOrError"]["results"]}
    assert status["s3_archive_topic_discovery"] == "RUNNING" and status["archive_e2e_pattern_offsets"] == "STOPPED"
    start_sensor(url, "archive_e2e_pattern_offsets")  # once, as a user turns an archive on

    created = time.time()
    topic = create_topic(kafka, f"{pattern}.b")
    produced = produce(kafka, topic, [(0, None, f"n{i}".encode(), []) for i in range(10)])
    deadline = time.monotonic() + 4 * DISCOVERY_S + 120
    while topic not in archive_assets(url):
        assert time.monotonic() < deadline, "the new topic's asset did not appear: " + json.dumps(
            sensor_ticks(url, "s3_archive_topic_discovery")[-3:])
        time.sleep(1)
    # The ticks that ended after the topic was created: one that began just before it may have listed it (under load
    # a tick takes seconds) and reloaded.
    ticks = [t for t in sensor_ticks(url, "s3_archive_topic_discovery")
             if t["endTimestamp"] is None or t["endTimestamp"] >= created]
    reloading = [i for i, t in enumerate(ticks) if f"reloaded through {env['S3_ARCHIVE_DAGSTER_URL']}" in
                 (t["skipReason"] or "")]
    assert reloading and reloading[0] < 2, ticks  # the first or the second tick after the topic appeared

    # Its windows are cut by the archive's offsets sensor, which now covers it, and archived by its runs.
    cfg = archive_config(services.bucket, topic, "e2e-pattern/")
    windows = [OffsetWindow(0, 0, 5), OffsetWindow(0, 5, 10)]
    deadline = time.monotonic() + 300
    while not all(manifest(s3, cfg, topic, w) for w in windows):
        assert time.monotonic() < deadline, "the new topic's windows were not archived within 300 s"
        time.sleep(1)
    assert archived_records(s3, cfg, topic) == produced


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    from s3_archive_tests.integration.process_list import cmdlines

    procs = cmdlines()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, (ppid, _) in procs.items() if ppid == p]
    return out


def test_a_run_killed_with_its_whole_process_tree_is_failed_and_its_windows_archived_by_the_sensors_rerun(
        dagster_dev, kafka, s3, services):
    import re

    url, *_ = dagster_dev
    topic = killed_topic()
    produced = produce(kafka, topic, [(0, None, f"k{i}".encode(), []) for i in range(80)])  # 4 windows, one run
    cfg = archive_config(services.bucket, topic, "e2e-killed/")
    windows = [OffsetWindow(0, s, s + 20) for s in range(0, 80, 20)]
    query = """query($t: String!) { runsOrError(filter: {tags: [{key: "s3_archive/topic", value: $t}]})
        { ... on Runs { results { runId status tags { key value } eventConnection { events {
          __typename ... on EngineEvent { message } } } } } } }"""

    def runs() -> list[dict]:
        return graphql(url, query, {"t": topic})["runsOrError"]["results"]

    start_sensor(url, "archive_e2e_killed_offsets")
    deadline = time.monotonic() + 300
    while True:  # the first run's step has started: its process tree is the run process, the step's, Spark's JVM
        found = [(r, m) for r in runs() for e in r["eventConnection"]["events"]
                 if e["__typename"] == "EngineEvent" and (m := re.search(r"Started process for run \(pid: (\d+)\)",
                                                                         e.get("message") or ""))]
        started = [(r, m) for r, m in found
                   if any(e["__typename"] == "ExecutionStepStartEvent" for e in r["eventConnection"]["events"])]
        if started:
            break
        assert time.monotonic() < deadline, f"no run of {topic!r} started its step within 300 s: {runs()}"
        time.sleep(0.5)
    (run, match) = started[0]
    tree = _tree(int(match[1]))
    assert len(tree) >= 2, tree  # the run process and its step's process at least
    def signal_all(sig: int) -> None:
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # a short-lived child that has already gone
                pass

    signal_all(signal.SIGSTOP)  # first, so that none goes on (or is reparented) while the others are killed
    assert not any(manifest(s3, cfg, topic, w) for w in windows), "the run committed before it could be killed"
    signal_all(signal.SIGKILL)
    print(f"\nkilled run {run['runId']}: {len(tree)} processes")

    # The run is failed; the offsets sensor requests its windows again and the rerun commits every one once.
    while not all(manifest(s3, cfg, topic, w) for w in windows):
        assert time.monotonic() < deadline + 300, f"the killed run's windows were not archived: {runs()}"
        time.sleep(1)
    assert archived_records(s3, cfg, topic) == produced  # 0 lost, 0 duplicated
    mine = {r["runId"]: r for r in runs()}
    assert mine[run["runId"]]["status"] == "FAILURE"
    reruns = [r for r in mine.values() if {"key": "s3_archive/rerun_of", "value": run["runId"]} in r["tags"]]
    assert reruns and {r["status"] for r in reruns} <= {"SUCCESS", "STARTED"}, mine
    # the killed run committed nothing: every window's manifest was written by the rerun
    attempts = {manifest(s3, cfg, topic, w).attempt for w in windows}
    assert len(attempts) == 1, attempts


def test_ui_launch_of_a_declared_restore_target_over_windows_with_no_run_config_restores_exactly_once(
        dagster_dev, kafka, s3, services):
    url, home, *_ = dagster_dev
    topic = restore_source()
    target = create_topic(kafka, f"{topic}.ui", partitions=2)
    windows = [OffsetWindow(0, 0, 30), OffsetWindow(0, 30, 60), OffsetWindow(1, 0, 30)]
    ts = int(time.time() * 1000) - 3_600_000
    records = {w: put_jsonl_window(s3, services.bucket, "e2e-restore/", topic, w, ts) for w in windows}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    asset = {"path": ["kafka_restore_target", "ui", topic]}

    # As the UI's Materialize over a partition range does: the asset job, the asset, the range, NO run config.
    # (launchPartitionBackfill takes the same path through the backfill daemon, at 30 s per daemon iteration.)
    launched = graphql(url, """mutation($p: ExecutionParams!) { launchPipelineExecution(executionParams: $p) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
        ... on RunConfigValidationInvalid { errors { message } } } }""", {"p": {
        "selector": {"repositoryLocationName": "s3_archive", "repositoryName": "__repository__",
                     "jobName": "__ASSET_JOB", "assetSelection": [asset]},
        "executionMetadata": {"tags": [{"key": "dagster/asset_partition_range_start", "value": windows[0].key},
                                       {"key": "dagster/asset_partition_range_end", "value": windows[-1].key}]}}})
    launched = launched["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id, status, deadline = launched["run"]["runId"], None, time.monotonic() + 180
    while status not in ("SUCCESS", "FAILURE", "CANCELED"):
        assert time.monotonic() < deadline, f"the restore run is still {status} after 180 s"
        time.sleep(1)
        status = graphql(url, """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }""",
                         {"id": run_id})["runOrError"]["status"]
    assert status == "SUCCESS", status

    got = consume_all(kafka, target)
    for p in (0, 1):  # every record once, in order
        assert [(g.key, g.value, g.timestamp_ms) for g in got[p]] == [
            r for w in windows if w.partition == p for r in records[w]]

    # Where people look: the per-window metadata is typed for the plots.
    mats = graphql(url, """query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset {
        assetMaterializations(limit: 10) { partition metadataEntries { __typename label } } } } }""",
                   {"k": asset})["assetOrError"]["assetMaterializations"]
    assert sorted(m["partition"] for m in mats) == sorted(w.key for w in windows)
    for m in mats:
        kinds = {e["label"]: e["__typename"] for e in m["metadataEntries"]}
        assert {k: kinds[k] for k in PLOT_KEYS} == {k: "IntMetadataEntry" if t is int else "FloatMetadataEntry"
                                                    for k, t in PLOT_KEYS.items()}


def test_a_follow_target_mirrors_each_new_window_byte_exact_with_no_manual_step(dagster_dev, kafka, s3, services):
    """The daemon runs the follow sensor (on from the start): each window the archive commits is restored into the
    target, in order, once. The windows are committed by hand (objects, manifest, the archive asset's
    materialization, as an archive run reports it), in two rounds: the second lands while the sensor follows."""
    url, home, *_ = dagster_dev
    topic, ts = follow_source(), int(time.time() * 1000) - 60_000
    target = f"{topic}.mirror"
    rounds = [[OffsetWindow(0, 0, 20), OffsetWindow(1, 0, 20)], [OffsetWindow(0, 20, 45)]]
    records: dict[OffsetWindow, list] = {}

    for windows in rounds:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
            for w in windows:
                records[w] = put_jsonl_window(s3, services.bucket, "e2e-follow/", topic, w, ts)
                instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic),
                                                                            partition=w.key))
        expected = {p: [r for w in sorted(records) if w.partition == p for r in records[w]] for p in (0, 1)}
        deadline = time.monotonic() + 240
        while True:
            got = consume_all(kafka, target)
            if {p: len(got.get(p, [])) for p in (0, 1)} == {p: len(expected[p]) for p in (0, 1)}:
                break
            assert time.monotonic() < deadline, f"the follow sensor did not restore {windows} within 240 s"
            time.sleep(1)
        # Every record once, in order, byte for byte: key, value, timestamp and headers (put_jsonl_window's one
        # header `o`: the offset's digits).
        assert {p: [(g.key, g.value, g.timestamp_ms) for g in got.get(p, [])] for p in (0, 1)} == expected
        assert all(g.headers == (("o", g.key[1:]),) for p in (0, 1) for g in got.get(p, []))

    sensors = graphql(url, """{ sensorsOrError(repositorySelector: {repositoryLocationName: "s3_archive",
        repositoryName: "__repository__"}) { ... on Sensors { results { name sensorState { status } } } } }""")
    status = {s["name"]: s["sensorState"]["status"] for s in sensors["sensorsOrError"]["results"]}
    assert status["restore_e2e_follow_mirror_follow"] == "RUNNING"


def test_the_sensors_rests_are_cut_at_a_cron_tick_and_its_table_registered(dagster_dev, s3, services, sensed):
    """The rests the sensor test produced as it ended (`sensed`), with no manual step: cut at a cron tick and
    archived, and the always-on sync sensor registers the archive's Glue table."""
    topic = dagster_dev[3]
    assert "produced" in sensed, "test_sensor_turned_on_archives_new_records_with_no_manual_step produces the rests"
    produced, cfg = sensed["produced"], archive_config(services.bucket, topic, "e2e-sensed/")
    rests = [OffsetWindow(p, 80, 83) for p in (0, 1)]
    deadline = time.monotonic() + 300
    while not all(manifest(s3, cfg, topic, w) for w in rests):
        assert time.monotonic() < deadline, "the sensor did not cut the rests at a cron tick within 300 s"
        time.sleep(1)
    assert archived_records(s3, cfg, topic) == produced

    glue = boto3.client("glue", endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                        aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])
    deadline = time.monotonic() + 300
    while True:
        try:
            table = glue.get_table(DatabaseName=DEFAULT_DATABASE, Name=table_name(topic))["Table"]
            break
        except glue.exceptions.EntityNotFoundException:
            assert time.monotonic() < deadline, "the catalog asset did not register the table within 300 s"
            time.sleep(1)
    assert table["StorageDescriptor"]["Location"] == f"s3://{services.bucket}/e2e-sensed/{topic}/"


def _topic_runs(url: str, topic: str) -> list[dict]:
    return graphql(url, """query($t: String!) { runsOrError(filter: {tags: [{key: "s3_archive/topic", value: $t}]})
        { ... on Runs { results { runId status tags { key value }
          eventConnection { events { __typename } } } } } }""", {"t": topic})["runsOrError"]["results"]


def _failed_once(run: dict) -> bool:
    """A step of the run failed (and was retried), or the run failed."""
    return run["status"] == "FAILURE" or any(
        e["__typename"] in ("ExecutionStepFailureEvent", "ExecutionStepRestartEvent")
        for e in run["eventConnection"]["events"])


def _windows_cut(home: Path, topic: str) -> int:
    """How many windows of `topic` the offsets sensor has cut (its partitions)."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return len(instance.get_dynamic_partitions(window_partitions(topic).name))


def test_an_s3_outage_during_sensor_driven_archiving_ends_with_every_window_committed_once(
        dagster_dev, kafka, s3, services, fault_proxy):
    url, home, *_ = dagster_dev
    topic = outage_topic()
    produced = produce(kafka, topic, [(i % 2, None, f"a{i}".encode(), []) for i in range(80)])  # 40 per partition
    start_sensor(url, "archive_e2e_outage_offsets")
    # S3 answers 503 SlowDown to everything while the sensor cuts windows and their runs start: the first four
    # windows, then (a tick later) the two of the records produced meanwhile; on until the outage has failed a step
    # or a run.
    fault_proxy.set_rules([FaultRule("slowdown", 1.0)])
    try:
        deadline = time.monotonic() + 200
        while _windows_cut(home, topic) < 4:
            assert time.monotonic() < deadline, "the sensor cut no window within 200 s"
            time.sleep(0.5)
        produced += produce(kafka, topic, [(i % 2, None, f"b{i}".encode(), []) for i in range(40)])
        while _windows_cut(home, topic) < 6 or not any(_failed_once(r) for r in _topic_runs(url, topic)):
            assert time.monotonic() < deadline, "no run met the S3 outage within 200 s, or the sensor did not cut " \
                                                f"the second records' windows: {_windows_cut(home, topic)} cut"
            time.sleep(1)
    finally:
        faults = fault_proxy.stats()["faults"]
        fault_proxy.clear()
    assert sum(faults.values()) > 0, faults

    cfg = archive_config(services.bucket, topic, "e2e-outage/")
    windows = [OffsetWindow(p, s, s + 20) for p in (0, 1) for s in (0, 20, 40)]
    deadline = time.monotonic() + 600
    while not all(manifest(s3, cfg, topic, w) for w in windows):
        assert time.monotonic() < deadline, "not every window was committed within 600 s of the outage"
        time.sleep(1)
    # 0 lost, 0 duplicated: every record once, in the committed windows' objects.
    assert archived_records(s3, cfg, topic) == sorted(produced, key=lambda r: (r.partition, r.offset))

    # The outage reached the runs, and they were retried (a step retried, or a failed run requested again).
    runs = _topic_runs(url, topic)
    retried = [r for r in runs if any(e["__typename"] == "ExecutionStepRestartEvent"
                                      for e in r["eventConnection"]["events"])
               or any(t["key"] == "s3_archive/rerun_of" for t in r["tags"])]
    assert retried, [(r["runId"], r["status"]) for r in runs]


def test_ui_backfill_over_a_window_range_archives_every_window(dagster_dev, ui_backfill, s3, services):
    """Last in the module: its backfill (`ui_backfill`) was launched as the module started."""
    url, _, topic, *_ = dagster_dev
    backfill_id, produced, windows = ui_backfill
    nodes = graphql(url, "{ assetNodes { assetKey { path } } }")["assetNodes"]
    assert {"path": ["kafka_archive", topic]} in [n["assetKey"] for n in nodes]

    deadline = time.monotonic() + 420
    status = None
    while time.monotonic() < deadline:
        status = graphql(url, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
            ... on PartitionBackfill { status } } }""", {"id": backfill_id})["partitionBackfillOrError"]["status"]
        if status not in ("REQUESTED",):
            break
        time.sleep(1)
    assert status in ("COMPLETED", "COMPLETED_SUCCESS"), status

    cfg = archive_config(services.bucket, topic, "e2e/")
    runs = graphql(url, """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
        ... on PartitionBackfill { runs { runId status } } } }""", {"id": backfill_id})
    run_list = runs["partitionBackfillOrError"]["runs"]
    assert len(run_list) == 1 and run_list[0]["status"] == "SUCCESS", run_list  # three windows, one Spark run
    assert all(manifest(s3, cfg, topic, w).record_count == 50 for w in windows)
    assert archived_records(s3, cfg, topic) == produced
