"""The PySpark daemon of SparkResource's sessions (s3_archive/io/pyspark_daemon.py): which of the Python path
entries Spark adds it takes off, and when it leaves the path alone."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from s3_archive.io.pyspark_daemon import redundant_paths
from s3_archive.io.spark import PYSPARK_DAEMON, SparkResource

pytestmark = pytest.mark.unit


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
