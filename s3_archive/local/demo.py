"""`s3-archive demo`: the embedded stack, demo topics with data, their windows archived, and the Dagster UI (`dg dev`).

The demo's archives are declared as components (`demo_defs/`: `demo/defs.yaml` a KafkaArchive, `replay/` and
`preview/` its KafkaRestoreTargets), and the UI serves them through Dagster's component loader
(`demo_location.py`). With $S3_ARCHIVE_CONFIG set, the demo serves that config instead (the package's code
location, `s3_archive.definitions`).

Everything the demo makes lives in the local dir (`$S3_ARCHIVE_LOCAL_DIR`): the broker's topics, moto's bucket,
the Dagster instance (`dagster_home/`) and the topic state (`state/`). A second run starts the same stack again
and finds it as it was: no new records, no new windows, the UI's windows still in the bucket. If the instance and
the bucket disagree all the same (local state from an older version, a bucket emptied by hand), the demo refuses to
start and says how to reset: `s3-archive local down --purge`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
from confluent_kafka.admin import NewTopic

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import Settings, load_settings, resolve_topic_patterns
from s3_archive.definitions import DEMO_CONFIG, build_defs
from s3_archive.defs.archive.discovery import describe
from s3_archive.defs.archive.instance import materialized_windows, read_windows
from s3_archive.defs.archive.partitions import RANGE_END, RANGE_START, archive_asset_key, window_partitions
from s3_archive.defs.archive.schedules import checks_job_name
from s3_archive.defs.archive.sensors import evaluate, sensor_name
from s3_archive.defs.resources import kafka_resource
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.paths import local_stack_dir, topic_state_file
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.io.topic_state import refresh_topics
from s3_archive.keys.objects import manifest_key, manifest_prefix
from s3_archive.local import stack
from s3_archive.local.demo_location import load_demo_defs
from s3_archive.local.processes import StackError, purge_command

DEMO_PARTITIONS = {"demo.orders": 3, "demo.clicks": 2}
# The demo's restore targets (`replay/defs.yaml`, `preview/defs.yaml`) produce into this topic: created empty.
DEMO_TARGETS = {"demo.orders.restored": 3}
RECORDS_PER_TOPIC = 6000


def seed_topics(kafka: KafkaResource) -> None:
    """Create the demo topics and give them records (only if they are empty), and the restore target's topic."""
    admin = kafka.admin()
    existing = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(t, n, 1) for t, n in {**DEMO_PARTITIONS, **DEMO_TARGETS}.items() if t not in existing]
    for f in admin.create_topics(new).values() if new else []:
        f.result(timeout=30)
    producer = kafka.producer(**{"linger.ms": 20})
    rng = random.Random(7)
    for topic, n in DEMO_PARTITIONS.items():
        if sum(kafka.offsets(topic, "latest").values()) > 0:
            continue
        for i in range(RECORDS_PER_TOPIC):
            value = {"id": i, "customer": f"c{rng.randrange(500)}", "amount": round(rng.uniform(1, 500), 2)}
            producer.produce(topic, key=f"c{i % 97}".encode(), value=json.dumps(value).encode(), partition=i % n,
                             headers=[("source", b"demo"), ("seq", str(i).encode())])
            if i % 1000 == 0:
                producer.poll(0)
    producer.flush(60)


def cut_windows(instance: dg.DagsterInstance, kafka: KafkaResource, archive: ArchiveConfig) -> dict[str, list[str]]:
    """One tick of the archive's offsets sensor, applied: the new window keys per topic, in insertion order."""
    result = evaluate(dg.build_sensor_context(instance=instance, resources={"kafka": kafka}), kafka, archive)
    added: dict[str, list[str]] = {}
    for req in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        added[req.partitions_def_name] = list(req.partition_keys)
    return {t: added.get(window_partitions(t).name, []) for t in archive.topics}


def lost_windows(instance: dg.DagsterInstance, s3: S3Client, archive: ArchiveConfig) -> dict[str, list[str]]:
    """Per topic, the windows the instance has as committed (materialized) whose manifest is not in the bucket."""
    lost: dict[str, list[str]] = {}
    for topic in archive.topics:
        windows, _ = read_windows(instance, topic)
        done = materialized_windows(instance, topic, [w.key for w in windows]) if windows else set()
        present = {o["Key"] for o in list_objects(s3, archive.bucket, manifest_prefix(archive.prefix, topic))}
        gone = [w.key for w in windows if w.key in done and manifest_key(archive.prefix, topic, w) not in present]
        if gone:
            lost[topic] = gone
    return lost


def check_consistent(instance: dg.DagsterInstance, s3: S3Client, archives: list[ArchiveConfig], home: Path) -> None:
    """StackError, saying how to reset, if the instance's committed windows are not all in the bucket."""
    lost = {t: keys for a in archives for t, keys in lost_windows(instance, s3, a).items()}
    if lost:
        shown = "; ".join(f"{t}: {len(keys)} (first {keys[0]})" for t, keys in sorted(lost.items()))
        raise StackError(f"the Dagster instance in {home} has committed windows whose manifests are not in the "
                         f"local bucket ({shown}): the instance and the bucket are not from the same stack. To start "
                         f"over with empty local state: `{purge_command()}`, then `make demo` again")


RESTORE_HINT = ("To restore: open kafka_restore_target/replay/demo.orders, click Materialize, click All in the "
                "dialog (it opens with no window selected), then Launch backfill; the records land in "
                "demo.orders.restored. kafka_restore_target/preview/demo.orders, clicked the same way, only plans: "
                "its plan is on its Events tab.")


def run(port: int = 3000, kafka_security: str | None = None) -> int:
    root = local_stack_dir()
    print(f"demo: starting the local stack in {root} …", flush=True)
    state = stack.up(root, stack.StackOptions(kafka_security=kafka_security))
    try:
        return _run(root, state, port)
    finally:
        stopped = stack.down(root)
        print(f"demo: stopped {', '.join(stopped) or 'nothing'}", flush=True)


def _run(root: Path, state: stack.StackState, port: int) -> int:
    os.environ.update(state.env())
    # The code location's topic state lives with the rest of the demo's state (one `down --purge` removes it).
    os.environ.setdefault("S3_ARCHIVE_STATE_DIR", str(root / "state"))
    print(stack.status(root), flush=True)
    dagster_home = root / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    repo_yaml = Path.cwd() / "dagster.yaml"
    if repo_yaml.exists():
        shutil.copyfile(repo_yaml, dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    own = "S3_ARCHIVE_CONFIG" not in os.environ  # the demo's declarations, not a config of the user's
    settings = load_settings(Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG)))
    with dg.build_resources({"kafka": kafka_resource()}) as resources:  # as the runs connect: from state.env()
        kafka = resources.kafka
    try:
        archives = _archive_demo(settings, kafka, dagster_home, own)
    finally:
        kafka.close()  # before the stack stops (a refused start too): librdkafka would log refused connections
    hint = (f"The sensor {', '.join(sensor_name(a) for a in archives)} (under Automation) archives new records as "
            "they arrive. The archives' checks were evaluated now (an archive asset's Checks tab); they "
            f"run daily once the schedule {', '.join(checks_job_name(a) + '_daily' for a in archives)} is on.")
    return _serve(port, hint + (f" {RESTORE_HINT}" if own else ""), _workspace(dagster_home, own))


def _archive_demo(settings: Settings, kafka: KafkaResource, dagster_home: Path, own: bool) -> list[ArchiveConfig]:
    """Seed the demo topics, refresh the topic state, cut the new windows and archive them (one run per topic),
    with the definitions the UI will serve (`own`: the demo's declarations, loaded as components)."""
    seed_topics(kafka)
    # Definitions read the topics of topic_patterns from the topic state: refresh it before the UI loads them.
    known = refresh_topics(settings, kafka, topic_state_file()).known
    if known:
        print(f"demo: topic_pattern topics: {describe(known)}", flush=True)
    defs = load_demo_defs() if own else build_defs(settings, known)
    archives = resolve_topic_patterns(settings, known).archives
    with dg.DagsterInstance.get() as instance:
        check_consistent(instance, stack.local_s3_client(os.environ["S3_ARCHIVE_S3_ENDPOINT_URL"]), archives,
                         dagster_home)
        for archive in archives:
            archived = False
            for topic, new in cut_windows(instance, kafka, archive).items():
                print(f"demo: {topic}: {len(new)} new windows", flush=True)
                if not new:
                    continue
                t = time.monotonic()
                result = dg.materialize(
                    [defs.get_assets_def(archive_asset_key(topic))], instance=instance, resources=defs.resources,
                    tags={RANGE_START: new[0], RANGE_END: new[-1]}, raise_on_error=False)
                archived = True
                print(f"demo: archived {len(new)} windows of {topic} in one run "
                      f"({'ok' if result.success else 'FAILED'}, {time.monotonic() - t:.1f}s)", flush=True)
            if archived:  # so that the UI shows them evaluated, not "Not Evaluated", on its first view
                checks = defs.resolve_job_def(checks_job_name(archive)).execute_in_process(instance=instance,
                                                                                         raise_on_error=False)
                print(f"demo: checks of archive {archive.name} evaluated "
                      f"({'ok' if checks.success else 'FAILED'})", flush=True)
    return archives


# The demo's code location: its declarations, under the name the package's own location has.
DEMO_WORKSPACE = """load_from:
  - python_module:
      module_name: s3_archive.local.demo_location
      location_name: s3_archive
"""


def _workspace(dagster_home: Path, own: bool) -> list[str]:
    """`dg dev`'s target: the demo's code location (a workspace file written into DAGSTER_HOME), or with a config
    of the user's the repository's workspace.yaml (`s3_archive.definitions`), or that module."""
    if own:
        workspace = dagster_home / "workspace.yaml"
        workspace.write_text(DEMO_WORKSPACE)
        return ["-w", str(workspace)]
    workspace = Path.cwd() / "workspace.yaml"
    return ["-w", str(workspace)] if workspace.exists() else ["-m", "s3_archive.definitions"]


def _serve(port: int, hint: str, target: list[str]) -> int:
    """`dg dev` on `port` until Ctrl-C; the UI's URL is printed once it answers. It runs in DAGSTER_HOME, where
    the demo copied the repository's dagster.yaml, so the instance is configured by it (and Dagster does not warn
    that a dagster.yaml in the working directory is not used)."""
    # `dg dev`, as Dagster 1.13 recommends (`dagster dev` says it is superseded), with the workspace as its target.
    dg_cli = Path(sys.executable).with_name("dg")
    proc = subprocess.Popen([str(dg_cli), "dev", "-h", "127.0.0.1", "-p", str(port), *target],
                            cwd=os.environ["DAGSTER_HOME"])
    try:
        if _answers(proc, f"http://127.0.0.1:{port}/server_info"):
            print(f"demo: Dagster UI on http://127.0.0.1:{port} (Ctrl-C stops it and the local stack; the next "
                  f"`make demo` finds everything as it was, `{purge_command()}` removes it). {hint}", flush=True)
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reached dg dev too: give it time to stop its webserver and daemon
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass  # killed below
        return 0
    finally:
        if proc.poll() is None:
            proc.kill()


def _answers(proc: subprocess.Popen, url: str, timeout_s: float = 300) -> bool:
    """Whether the webserver answers `url` before `proc` exits (or `timeout_s` passes)."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return False
