"""An archive declared as a component, as a user does it with `dg` in a fresh project directory: scaffolded,
checked, and one window of it materialized with `dg launch` against the real broker, moto and Spark
(docs/components.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import yaml

from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.io.s3 import read_manifest
from s3_archive.keys.objects import manifest_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.component_project import new_project
from s3_archive_tests.kafka_helpers import create_topic, produce

DG = Path(sys.executable).parent / "dg"


def _dg(project: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(DG), *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"dg {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_scaffold_check_and_materialize_a_window_of_an_archive_component(kafka, s3, services, unique, tmp_path):
    project = new_project(tmp_path / "shop")
    topic = create_topic(kafka, f"dg-{unique}")
    produce(kafka, topic, [(0, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(20)])
    home = tmp_path / "dagster_home"
    home.mkdir()
    # The project is not installed: its sources are found as dg's own error message says (PYTHONPATH).
    path = os.pathsep.join([str(project / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, **services.env(), "DAGSTER_HOME": str(home), "PYTHONPATH": path}

    prefix = f"dg/{unique}/"
    out = _dg(project, env, "scaffold", "defs", "s3_archive.KafkaArchive", "orders", "--json-params",
              json.dumps({"bucket": services.bucket, "topics": [topic], "prefix": prefix}))
    declared = yaml.safe_load((project / "src/shop/defs/orders/defs.yaml").read_text())
    assert declared == {"type": "s3_archive.KafkaArchive",
                        "attributes": {"name": "orders", "topics": [topic], "bucket": services.bucket,
                                       "prefix": prefix, "format": "parquet", "flush": {"count": 1000}}}, out

    assert "All definitions loaded successfully" in _dg(project, env, "check", "defs")

    window = OffsetWindow(0, 0, 20)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(window_partitions(topic).name, [window.key])
    _dg(project, env, "launch", "--assets", archive_asset_key(topic).to_user_string(), "--partition", window.key)

    committed = read_manifest(s3, services.bucket, manifest_key(prefix, topic, window))
    assert committed is not None and committed.record_count == 20
    with dg.DagsterInstance.from_config(str(home)) as instance:
        done = instance.fetch_materializations(archive_asset_key(topic), limit=10).records
    assert [r.partition_key for r in done] == [window.key]
