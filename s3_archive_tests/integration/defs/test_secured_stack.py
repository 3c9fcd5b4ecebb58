"""The product against a secured deployment, configured only by environment variables (docs/configuration.md):
Kafka on SASL_SSL (SCRAM-SHA-512, a private CA) with a user whose name and password hold quotes, spaces and
backslashes; S3 at an HTTPS endpoint with a custom CA bundle, static keys, SSE-KMS and a storage class.

One archive is cut, written and restored through it: `s3-archive refresh-topics` discovers the topic, the offsets
sensor cuts its windows, a run in a fresh process (Spark's Kafka source, s3a) archives them while this test reads
every process's command line, the checks run, and a restore (transactional producer + ledger) replays them
byte-exact. A wrong password is one clear error naming the broker and the user, for the sensor, a run and a restore.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import load_settings, resolve_topic_patterns
from s3_archive.definitions import load_defs
from s3_archive.defs.archive.checks import contiguity_result, headroom_result, objects_result, retention_result
from s3_archive.defs.archive.partitions import archive_asset_key
from s3_archive.defs.archive.sensors import sensor_name
from s3_archive.defs.restore.assets import restore_asset_key
from s3_archive.defs.restore.config import RestoreConfig
from s3_archive.io.s3 import list_objects
from s3_archive.io.spark import SparkResource
from s3_archive.keys.objects import MANIFESTS
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.conftest import SECURE_USER, SecureServices
from s3_archive_tests.integration.process_list import cmdlines
from s3_archive_tests.kafka_helpers import NASTY, Rec, consume_all, create_topic, produce

REPO = Path(__file__).resolve().parents[3]
FLUSH = 4  # records per window: the 8 NASTY records make two windows

# An archive run as a deployment makes one: a fresh process, definitions and resources from the environment.
RUN_ARCHIVE = """
import sys
import dagster as dg
from s3_archive.definitions import load_defs
from s3_archive.defs.archive.partitions import archive_asset_key

topic, first, last = sys.argv[1:]
defs = load_defs()
with dg.DagsterInstance.get() as instance:
    result = dg.materialize([defs.get_assets_def(archive_asset_key(topic))], instance=instance,
                            resources=defs.resources, raise_on_error=False,
                            tags={"dagster/asset_partition_range_start": first,
                                  "dagster/asset_partition_range_end": last})
sys.exit(0 if result.success else 1)
"""


def descendants(procs: dict[int, tuple[int, str]], root: int) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in procs.items() if ppid in frontier} - found
        found |= frontier
    return found


@dataclass
class Watched:
    """A child process's outcome, and every command line of its process tree seen while it ran."""

    returncode: int
    output: str
    tree: dict[int, str]
    leaks: list[str]  # any process on the machine whose command line held a secret


def run_watched(cmd: list[str], env: dict[str, str], secrets: list[str], timeout: float = 300) -> Watched:
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree: dict[int, str] = {}
    leaks: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"{cmd[:3]} did not finish in {timeout:.0f}s"
            procs = cmdlines()
            tree |= {pid: procs[pid][1] for pid in descendants(procs, proc.pid) if pid in procs}
            leaks += [f"pid {pid}: {cmd[:200]}" for pid, (_, cmd) in procs.items() if any(s in cmd for s in secrets)]
            time.sleep(0.2)
        return Watched(proc.returncode, proc.stdout.read(), tree, leaks)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


def error_text(e: BaseException) -> str:
    """A raised error and its causes, as a user sees them."""
    parts = []
    while e is not None:
        parts.append(str(e))
        e = e.__cause__ or e.__context__
    return "\n".join(parts)


def failure_text(result: dg.ExecuteInJobResult) -> str:
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "the run should have failed"
    return "\n".join(str(e.event_specific_data.error.message) + str(e.event_specific_data.error.cause or "")
                     for e in failures)


def event_log_text(instance: dg.DagsterInstance) -> str:
    """Every event of every run (messages, metadata, run config and tags) as text."""
    out = []
    for run in instance.get_runs():
        out += [json.dumps(run.run_config, default=str), json.dumps(run.tags, default=str)]
        out += [str(e) for e in instance.all_logs(run.run_id)]
    return "\n".join(out)


@dataclass
class SecuredArchive:
    secure: SecureServices
    env: dict[str, str]
    instance: dg.DagsterInstance
    cfg: ArchiveConfig
    topic: str
    produced: list[Rec]
    windows: list[OffsetWindow]
    refresh_output: str
    run: Watched


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for k in ("S3_ARCHIVE_ENV", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            mp.delenv(k, raising=False)  # nothing but the documented variables
        for k, v in env.items():
            mp.setenv(k, v)
        yield


@pytest.fixture(scope="module")
def secured(secure_services: SecureServices, tmp_path_factory) -> Iterator[SecuredArchive]:
    secure = secure_services
    root = tmp_path_factory.mktemp("secured")
    unique = os.urandom(4).hex()
    pattern = f"secured-{unique}"
    config = root / "archives.yaml"
    config.write_text(json.dumps({"archives": [
        {"name": "secured", "topic_pattern": rf"{pattern}\..*", "bucket": secure.bucket, "prefix": "secured/",
         "flush": {"count": FLUSH, "interval_seconds": 3600}}]}))
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")  # the default instance: SQLite in this directory
    env = {**secure.env(), "S3_ARCHIVE_CONFIG": str(config), "S3_ARCHIVE_STATE_DIR": str(root / "state"),
           "DAGSTER_HOME": str(home), "S3_ARCHIVE_S3_SSE_KMS_KEY_ID": secure.kms_key_id,
           "S3_ARCHIVE_S3_STORAGE_CLASS": "STANDARD_IA", "NO_PROXY": "127.0.0.1,localhost"}
    kafka = secure.kafka()
    topic = create_topic(kafka, f"{pattern}.orders")
    produced = produce(kafka, topic, [(0, k, v, h) for k, v, h in NASTY])
    # S3_ARCHIVE_HOME stays: it holds the jars (and AppCDS archive) of this venv's Spark, not a setting under test.
    child_env = {k: v for k, v in os.environ.items()
                 if k == "S3_ARCHIVE_HOME" or not k.startswith(("AWS_", "S3_ARCHIVE_"))} | env

    # Discovery, as a deployment's entrypoint runs it.
    refresh = subprocess.run([sys.executable, "-m", "s3_archive.cli", "refresh-topics"], env=child_env, cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert refresh.returncode == 0, refresh.stderr
    with environment(env), dg.DagsterInstance.get() as instance:
        defs = load_defs()
        cfg = resolve_topic_patterns(load_settings(config), {"secured": [topic]}).archives[0]
        sensor = defs.get_repository_def().get_sensor_def(sensor_name(cfg))
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs,
                                     resources={"kafka": defs.resources["kafka"], "s3": defs.resources["s3"]}) as context:
            data = sensor.evaluate_tick(context)
        windows = []
        for req in data.dynamic_partitions_requests:  # as the daemon does before it launches the runs
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            windows += sorted(OffsetWindow.parse(k) for k in req.partition_keys)
        run = run_watched([sys.executable, "-c", RUN_ARCHIVE, topic, windows[0].key, windows[-1].key], child_env,
                          [secure.password, secure.s3_secret])
        yield SecuredArchive(secure, env, instance, cfg, topic, produced, windows, refresh.stdout, run)


def test_discovery_sensor_and_a_fresh_process_run_archive_through_sasl_ssl_and_https(secured):
    s = secured
    assert f"new: {s.topic}" in s.refresh_output
    assert s.windows == [OffsetWindow(0, 0, FLUSH), OffsetWindow(0, FLUSH, 2 * FLUSH)]
    assert s.run.returncode == 0, s.run.output[-5000:]
    with environment(s.env):
        client = s.secure.s3().get_client()
    keys = [o["Key"] for o in list_objects(client, s.cfg.bucket, s.cfg.prefix)]
    data = [k for k in keys if k.startswith(f"{s.cfg.prefix}{s.topic}/")]
    manifests = [k for k in keys if MANIFESTS in k.split("/")]
    assert len(data) == 2 and len(manifests) == 2, keys
    # Every object SSE-KMS encrypted with the key; data objects in the storage class, manifests left STANDARD.
    for key in data + manifests:
        head = client.head_object(Bucket=s.cfg.bucket, Key=key)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", s.secure.kms_key_id), key
        assert head.get("StorageClass") == ("STANDARD_IA" if key in data else None), key


def test_no_secret_on_any_command_line_nor_in_logs_or_metadata(secured):
    s = secured
    secrets = [s.secure.password, s.secure.s3_secret]
    jvms = [cmd for cmd in s.run.tree.values() if "org.apache.spark.deploy.SparkSubmit" in cmd]
    assert jvms, f"no Spark JVM seen during the run: {list(s.run.tree.values())}"
    assert s.run.leaks == []
    assert not any(x in s.run.output for x in secrets)  # the run's logs (Dagster's and Spark's)
    assert not any(x in event_log_text(s.instance) for x in secrets)  # messages, metadata, run config, tags


def test_the_checks_pass_with_the_same_connection(secured):
    s = secured
    with environment(s.env), dg.build_resources(load_defs().resources) as res:
        results = [contiguity_result(s.instance, s.topic), objects_result(s.instance, res.s3, s.cfg, s.topic),
                   retention_result(s.instance, res.kafka, s.topic),
                   headroom_result(s.instance, res.kafka, s.cfg, s.topic)]
    assert [r.passed for r in results] == [True] * 4, [r.description for r in results]


def test_a_restore_replays_the_windows_byte_exact(secured):
    s = secured
    kafka = s.secure.kafka()
    target = create_topic(kafka, f"{s.topic}.restored")
    with environment(s.env):
        defs = load_defs()
        asset = defs.get_assets_def(restore_asset_key(s.topic))
        result = dg.materialize(
            [asset], instance=s.instance, resources=defs.resources,
            run_config=dg.RunConfig(ops={asset.op.name: RestoreConfig(target_topic=target)}),
            tags={"dagster/asset_partition_range_start": s.windows[0].key,
                  "dagster/asset_partition_range_end": s.windows[-1].key})
    assert result.success
    got = consume_all(kafka, target)[0]
    assert [(g.key, g.value, g.headers, g.timestamp_ms) for g in got] == \
        [(r.key, r.value, r.headers, r.timestamp_ms) for r in s.produced]
    assert not any(x in event_log_text(s.instance) for x in (s.secure.password, s.secure.s3_secret))


def refused(text: str, secure: SecureServices) -> None:
    """One clear error: names the broker and the user, says the login was refused, never shows the password."""
    assert f"Kafka at {secure.bootstrap_servers} as user {SECURE_USER!r} (SCRAM-SHA-512) refused the login" in text
    assert "S3_ARCHIVE_KAFKA_SASL_PASSWORD" in text
    assert secure.password not in text and "wrong-password" not in text


def test_a_wrong_password_is_one_clear_error_for_the_sensor_a_run_and_a_restore(secured):
    s = secured
    wrong = s.secure.kafka(password="wrong-password", timeout_s=3)
    with environment(s.env):
        defs = load_defs()
    sensor = defs.get_repository_def().get_sensor_def(sensor_name(s.cfg))
    with dg.build_sensor_context(instance_ref=s.instance.get_ref(), definitions=defs,
                                 resources={"kafka": wrong, "s3": defs.resources["s3"]}) as context, pytest.raises(Exception) as tick:
        sensor.evaluate_tick(context)
    refused(error_text(tick.value), s.secure)

    # No Spark session is started: the run fails at its first Kafka call.
    res = {"kafka": wrong, "s3": s.secure.s3(), "spark": SparkResource()}
    run = dg.materialize([defs.get_assets_def(archive_asset_key(s.topic))], instance=s.instance, resources=res,
                         partition_key=s.windows[0].key, raise_on_error=False)
    refused(failure_text(run), s.secure)

    asset = defs.get_assets_def(restore_asset_key(s.topic))
    restore = dg.materialize([asset], instance=s.instance, resources=res, partition_key=s.windows[0].key,
                             run_config=dg.RunConfig(ops={asset.op.name: RestoreConfig(target_topic=f"{s.topic}.x")}),
                             raise_on_error=False)
    refused(failure_text(restore), s.secure)
