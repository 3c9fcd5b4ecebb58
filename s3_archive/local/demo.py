"""`s3-archive demo`: the embedded stack, demo topics with data, their windows archived, and the Dagster UI."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
from confluent_kafka.admin import NewTopic

from s3_archive import paths
from s3_archive.definitions import DEMO_CONFIG, build_defs
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.local import stack
from s3_archive.resources import KafkaResource
from s3_archive.settings import load_settings
from s3_archive.windows import OffsetWindow, cut_full_windows, next_offsets

DEMO_PARTITIONS = {"demo.orders": 3, "demo.clicks": 2}
RECORDS_PER_TOPIC = 6000


def seed_topics(kafka: KafkaResource) -> None:
    """Create the demo topics and give them records (only if they are empty)."""
    admin = kafka.admin()
    existing = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(t, n, 1) for t, n in DEMO_PARTITIONS.items() if t not in existing]
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


def register_windows(instance: dg.DagsterInstance, kafka: KafkaResource, topic: str, count: int) -> list[str]:
    """Add the full windows that fit below the high watermarks as dynamic partitions; returns the new keys."""
    name = window_partitions(topic).name
    existing = [OffsetWindow.parse(k) for k in instance.get_dynamic_partitions(name)]
    start = next_offsets(existing)
    new = [w.key for p, hw in sorted(kafka.offsets(topic, "latest").items())
           for w in cut_full_windows(p, start.get(p, 0), hw, count)]
    if new:
        instance.add_dynamic_partitions(name, new)
    return new


def run(port: int = 3000) -> int:
    root = paths.local_stack_dir()
    print(f"demo: starting the local stack in {root} …", flush=True)
    state = stack.up(root)
    os.environ.update(state.env())
    print(stack.status(root), flush=True)
    dagster_home = root / "dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    repo_yaml = Path.cwd() / "dagster.yaml"
    if repo_yaml.exists():
        shutil.copyfile(repo_yaml, dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    settings = load_settings(Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG)))
    kafka = KafkaResource(bootstrap_servers=state.bootstrap_servers)
    seed_topics(kafka)
    defs = build_defs(settings, "local")
    with dg.DagsterInstance.get() as instance:
        for archive in settings.archives:
            for topic in archive.topics:
                new = register_windows(instance, kafka, topic, archive.flush.count)
                print(f"demo: {topic}: {len(new)} new windows", flush=True)
                if not new:
                    continue
                t = time.monotonic()
                result = dg.materialize(
                    [defs.get_assets_def(archive_asset_key(topic))], instance=instance, resources=defs.resources,
                    tags={"dagster/asset_partition_range_start": new[0],
                          "dagster/asset_partition_range_end": new[-1]}, raise_on_error=False)
                print(f"demo: archived {len(new)} windows of {topic} in one run "
                      f"({'ok' if result.success else 'FAILED'}, {time.monotonic() - t:.1f}s)", flush=True)
    print(f"demo: Dagster UI on http://127.0.0.1:{port} (Ctrl-C stops it and the local stack)", flush=True)
    workspace = Path.cwd() / "workspace.yaml"
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "s3_archive.definitions"]
    proc = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(port), *target])
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait(30)
        return 0
    finally:
        if proc.poll() is None:
            proc.kill()
        stopped = stack.down(root)
        print(f"demo: stopped {', '.join(stopped) or 'nothing'}", flush=True)
