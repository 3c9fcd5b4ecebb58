"""The demo as a newcomer meets it, clicked through in a real browser.

`s3-archive demo` (what `make demo` runs) is started, stopped with Ctrl-C and started again; the second start must
find the stack as it left it (the UI's windows still in the bucket, nothing archived twice). Then headless Chromium
(Debian's, through chromedriver) does what a person does in the UI: dismisses Dagster's first-run dialog, opens the
archive asset, opens a window's metadata, and launches a restore from the restore target's dialog; the restored
records are compared byte for byte with the archived topic. Screenshots of each step: `browser.artifacts_dir`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from s3_archive.io.kafka import KafkaResource
from s3_archive.keys.objects import manifest_key, manifest_prefix
from s3_archive.local.processes import free_port
from s3_archive.local.stack import down, local_s3_client, read_state
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.e2e.browser import Browser, artifacts_dir, chromium, starting_with, with_text
from s3_archive_tests.e2e.dagster_graphql import graphql
from s3_archive_tests.kafka_helpers import consume_all

REPO = Path(__file__).resolve().parents[2]
TOPIC, TARGET, RESTORE_ASSET = "demo.orders", "demo.orders.restored", "kafka_restore_target/replay/demo.orders"
BUCKET, PREFIX = "s3-archive-local", "archive/"


@dataclass
class Demo:
    url: str
    root: Path  # the demo's local dir ($S3_ARCHIVE_LOCAL_DIR)
    logs: list[Path]
    proc: subprocess.Popen  # the running (second) demo


def start_demo(root: Path, port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("S3_ARCHIVE_CONFIG", "S3_ARCHIVE_STATE_DIR", "DAGSTER_HOME")}
    # Ctrl-C must reach it as in a terminal: a runner started in the background ignores SIGINT, and its children
    # would inherit that.
    proc = subprocess.Popen([sys.executable, "-m", "s3_archive.cli", "demo", "--port", str(port)], cwd=REPO,
                            env={**env, "S3_ARCHIVE_LOCAL_DIR": str(root)}, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, f"the demo exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                return proc
        except OSError:
            assert time.monotonic() < deadline, f"the demo's UI did not come up in 300 s:\n{log.read_text()[-4000:]}"
            time.sleep(0.25)


def stop_demo(proc: subprocess.Popen) -> int:
    """Ctrl-C, as a person stops it: SIGINT to the demo and its `dagster dev` (one process group)."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[Demo]:
    base = tmp_path_factory.mktemp("demo")
    root, port = base / "local", free_port()
    logs = [base / "demo-1.log", base / "demo-2.log"]
    proc = start_demo(root, port, logs[0])
    try:
        assert stop_demo(proc) == 0, logs[0].read_text()[-4000:]
        assert read_state(root) is None  # the stack stopped with the demo
        proc = start_demo(root, port, logs[1])
        yield Demo(f"http://127.0.0.1:{port}", root, logs, proc)
    finally:
        if proc.poll() is None:
            stop_demo(proc)
        left = down(root)  # by PID: what a demo that failed to stop left running
        assert not left, f"the demo left {left} running"


def _printed(log: Path, line: str, timeout_s: float = 30) -> str:
    """The log's text once it holds `line`: the fixture saw the UI answer, and the demo prints its URL after its own
    poll of the UI does, a moment later."""
    deadline = time.monotonic() + timeout_s
    while line not in (text := log.read_text()):
        assert time.monotonic() < deadline, f"{line!r} not printed within {timeout_s:g}s:\n{text[-3000:]}"
        time.sleep(0.2)
    return text


def kafka_of(demo: Demo) -> KafkaResource:
    state = read_state(demo.root)
    assert state is not None, "the demo's stack is not running"
    return KafkaResource(bootstrap_servers=state.bootstrap_servers)


def test_a_second_demo_start_finds_the_ui_and_the_bucket_in_agreement(demo):
    first, second = demo.logs[0].read_text(), _printed(demo.logs[1], "demo: Dagster UI on http://127.0.0.1:")
    assert f"demo: {TOPIC}: 6 new windows" in first and "demo: archived 6 windows of demo.orders in one run (ok" in first
    assert "demo: checks of archive demo evaluated (ok)" in first  # so the UI shows them evaluated
    # The UI's address is printed once the webserver answers it (after dg dev says it serves); the first demo may
    # be stopped before it prints it (the test stops it as soon as the UI answers).
    assert second.index("Serving dagster-webserver") < second.index("demo: Dagster UI on http://127.0.0.1:")
    both = first + second
    assert "will not be used to configure Dagster" not in both  # the copied dagster.yaml is the one used
    assert "Use 'dg dev' instead" not in both  # the demo runs what Dagster 1.13 recommends
    assert "Connection refused" not in both  # every Kafka client is closed before the stack stops (Ctrl-C)
    assert "UserWarning" not in both
    assert f"demo: {TOPIC}: 0 new windows" in second and "demo: demo.clicks: 0 new windows" in second
    # The UI serves the demo's component declarations (local/demo_defs/) through Dagster's component loader.
    assert "module_name: s3_archive.local.demo_location" in (demo.root / "dagster_home" / "workspace.yaml").read_text()
    statuses = graphql(demo.url, """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
        assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions } } } } }""",
                       {"k": {"path": ["kafka_archive", TOPIC]}})
    materialized = statuses["assetNodeOrError"]["assetPartitionStatuses"]["materializedPartitions"]
    state = read_state(demo.root)
    s3 = local_s3_client(state.s3_endpoint_url)
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=manifest_prefix(PREFIX, TOPIC))["Contents"]}
    assert len(materialized) == 6
    assert {manifest_key(PREFIX, TOPIC, OffsetWindow.parse(k)) for k in materialized} == listed


def test_a_restore_clicked_in_the_ui_lands_every_record_byte_for_byte(demo, request):
    with chromium(artifacts_dir(request.node.name)) as b:
        dismiss_first_run_dialog(b, demo.url)
        open_archive_window(b, demo.url)
        launch_restore_from_dialog(b)
        wait_for_restore_run(demo.url)
        b.driver.get(f"{demo.url}/assets/{RESTORE_ASSET}?view=partitions")
        b.visible(with_text("Materialized (6)"), timeout=60)  # every window restored, as the UI shows it
        b.shot("restored-windows")
    with closing(kafka_of(demo)) as kafka:
        source, restored = consume_all(kafka, TOPIC), consume_all(kafka, TARGET)
    assert sum(len(v) for v in source.values()) == 6000
    for p, records in source.items():  # partition mapping `same`: partition p into partition p, in order
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in restored[p]] == [
            (r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def dismiss_first_run_dialog(b: Browser, url: str) -> None:
    b.driver.get(url)
    skip = b.visible(with_text("Skip", "button"), timeout=60)
    b.shot("first-run-dialog")
    skip.click()
    b.wait().until(lambda d: not d.find_elements("xpath", with_text("Skip", "button")))
    b.shot("ui-home")


def open_archive_window(b: Browser, url: str) -> None:
    b.driver.get(f"{url}/assets")
    b.click(f"//a[contains(@href, '/assets/kafka_archive/{TOPIC}')]", timeout=60)
    b.visible(starting_with(f"Kafka topic {TOPIC} archived"))  # the description
    b.shot("archive-asset")
    b.click(with_text("Checks"))
    b.visible(with_text("windows_contiguous"))
    b.shot("archive-checks")
    assert "Not evaluated" not in b.text(), "the demo evaluates the checks once, so none is left unevaluated"
    b.driver.back()
    b.click(with_text("Partitions"))
    b.click(starting_with("p00000-"))
    b.visible(with_text("outcome"))
    assert "committed" in b.text() and "manifest" in b.text()
    b.shot("window-metadata")


def launch_restore_from_dialog(b: Browser) -> None:
    """As the archive's description says: its restore link, then as the target's description says."""
    b.click("//a[contains(@href, 'view=overview')]")  # the asset's tab, not the navigation's Overview
    b.click(f"//a[normalize-space()='{RESTORE_ASSET}']")
    b.visible(starting_with("To restore"))
    b.shot("restore-target")
    b.click("//button[starts-with(normalize-space(), 'Materialize')]")
    b.visible(with_text("Launch backfill", "button"))
    b.shot("restore-dialog")
    b.click(with_text("All", "button"))
    b.shot("restore-dialog-all-selected")
    b.click(with_text("Launch backfill", "button"))
    b.shot("restore-launched")


def wait_for_restore_run(url: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while True:
        runs = graphql(url, """{ runsOrError(limit: 5) { ... on Runs { results { runId status
            tags { key value } } } } }""")["runsOrError"]["results"]
        ours = [r for r in runs if any(t["key"] == "dagster/backfill" for t in r["tags"])]
        if ours and ours[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            assert ours[0]["status"] == "SUCCESS", ours[0]
            return ours[0]["runId"]
        assert time.monotonic() < deadline, f"no finished restore run within {timeout} s: {runs}"
        time.sleep(0.5)


def test_the_printed_reset_command_runs_as_printed(demo):
    """Last in this module: it stops the demo. The reset command the demo printed, run as typed where `make demo`
    runs, removes the demo's local state."""
    assert stop_demo(demo.proc) == 0
    printed = demo.logs[1].read_text()
    command = printed.split("the next `make demo` finds everything as it was, `", 1)[1].split("` removes it", 1)[0]
    assert command.endswith(" local down --purge"), command
    env = {**os.environ, "S3_ARCHIVE_LOCAL_DIR": str(demo.root)}
    done = subprocess.run(command, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command!r} as printed: {done.stdout}{done.stderr}"
    assert not demo.root.exists()
