"""The PySpark daemon of SparkResource's sessions (s3_archive/io/pyspark_daemon.py): which of the Python path
entries Spark adds it takes off, and when it leaves the path alone."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from s3_archive.io.pyspark_daemon import redundant_paths
from s3_archive.io.spark import PYSPARK_DAEMON, SparkResource


@pytest.fixture
def installed(tmp_path):
    """site-packages with pyspark (as pip installs it: python/lib zips and jars inside) and py4j."""
    site = tmp_path / "site-packages"
    home = site / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "__init__.py").write_text("")
    (site / "py4j").mkdir()
    zips = [str(home / "python" / "lib" / "pyspark.zip"), str(home / "python" / "lib" / "py4j-0.10.9.9-src.zip"),
            str(home / "jars" / "spark-core_2.13-4.1.1.jar")]
    return site, home, zips


def test_the_zips_and_the_jar_go_when_spark_home_is_the_installed_pyspark(installed):
    site, home, zips = installed
    path = ["/cwd", *zips, "/work/app", str(site)]
    assert redundant_paths(path, str(home)) == zips


def test_a_spark_distribution_or_another_pyspark_keeps_its_path(installed, tmp_path):
    site, _home, zips = installed
    path = ["/cwd", *zips, str(site)]
    assert redundant_paths(path, None) == []
    assert redundant_paths(path, str(tmp_path / "spark-4.1.1-bin-hadoop3")) == []
    # pyspark only in the zip (not installed): nothing may go
    assert redundant_paths(["/cwd", *zips], str(installed[1])) == []


def test_py4j_zip_stays_when_py4j_is_not_installed(installed):
    site, home, zips = installed
    (site / "py4j").rmdir()
    assert redundant_paths(["/cwd", *zips, str(site)], str(home)) == [zips[0], zips[2]]


def test_the_resource_runs_it_for_sessions_it_starts_and_spark_can_import_it(tmp_path, monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    (tmp_path / "jars" / "spark" / "spark-sql-kafka-0-10_2.13-4.1.1.jar").write_bytes(b"")
    assert SparkResource().spark_conf()["spark.python.daemon.module"] == PYSPARK_DAEMON
    assert SparkResource(master="spark://m:7077").spark_conf()["spark.python.daemon.module"] == PYSPARK_DAEMON
    assert "spark.python.daemon.module" not in SparkResource(remote="sc://spark:15002").spark_conf()
    assert importlib.util.find_spec(PYSPARK_DAEMON) is not None


def test_the_daemon_hands_over_to_pysparks_with_the_zips_off_the_path(installed, tmp_path):
    """`main` as Spark runs it (`python -m MODULE pyspark.worker`), with pyspark.daemon's manager replaced by one
    that prints where pyspark came from and the path."""
    site, home, zips = installed
    (home / "daemon.py").write_text("import sys\nimport pyspark\n"
                                    "def manager():\n    print(pyspark.__file__)\n    print(sys.argv[1:])\n"
                                    "    print('|'.join(sys.path))\n")
    repo = Path(__file__).resolve().parents[3]
    env = {"SPARK_HOME": str(home), "PYTHONPATH": ":".join([*zips, str(repo), str(site)])}
    out = subprocess.run([sys.executable, "-m", PYSPARK_DAEMON, "pyspark.worker"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == str(home / "__init__.py")
    assert out[1] == "['pyspark.worker']"
    assert not set(zips) & set(out[2].split("|"))


_PRELOADED = """
import json, sys, threading, gc
from s3_archive.io.pyspark_daemon import preload
failed = preload(("s3_archive.archive.executor.task", "boto3", "no_such_module_for_the_test"))
import boto3
print(json.dumps({"failed": failed, "threads": threading.active_count(), "frozen": gc.get_freeze_count(),
                  "writer": "s3_archive.archive.executor.task" in sys.modules,
                  "loaded": [k[-1] for k in boto3.DEFAULT_SESSION._session.get_component("data_loader")._cache]}))
"""


def test_preload_imports_the_write_path_and_reports_what_it_could_not(tmp_path):
    """In a fresh interpreter, as the daemon runs it: the write path and boto3's default session are loaded, no
    thread is started (a fork keeps only the forking thread), the objects are frozen, and a module that cannot be
    imported is named on stderr (stdout is the daemon's channel to the JVM), not raised."""
    no_aws = {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    proc = subprocess.run([sys.executable, "-c", _PRELOADED], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3], env={"PATH": os.environ["PATH"], **no_aws})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["writer"]
    assert "s3/2006-03-01/service-2" in out["loaded"]  # botocore's S3 model, in the session workers will use
    assert out["threads"] == 1
    assert out["frozen"] > 0
    assert [f.split(":")[0] for f in out["failed"]] == ["no_such_module_for_the_test"]
    assert "not preloaded (no_such_module_for_the_test: ModuleNotFoundError" in proc.stderr


_UNPICKLED = """
import pickle, sys
batches = pickle.loads(sys.stdin.buffer.read())([1, 2])
print(list(batches), sorted(m for m in ("dagster", "pydantic", "pyspark", "s3_archive.io.spark") if m in sys.modules))
"""


def test_a_worker_unpickles_the_warm_up_function_without_the_driver_side_imports():
    """`start_python_workers`'s job function, pickled as PySpark pickles it and loaded in a fresh interpreter as a
    worker loads it: its module comes with nothing but the standard library (a worker that imported io/spark.py
    imported dagster, ~1.5 CPU-s beside the driver's planning)."""
    from pyspark import cloudpickle

    from s3_archive.io import spark

    payload = cloudpickle.dumps(spark.same_batches)
    proc = subprocess.run([sys.executable, "-c", _UNPICKLED], input=payload, capture_output=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3], env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["[1,", "2]", "[]"]
