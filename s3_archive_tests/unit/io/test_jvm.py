"""The driver's JVM flags per profile (s3_archive/io/jvm.py) and how SparkResource passes them on."""

from __future__ import annotations

import os

import pytest

from s3_archive.io.jvm import (
    C1_ONLY,
    SERIAL_GC,
    cds_archive,
    classpath_files,
    classpath_fingerprint,
    classpath_list,
    driver_java_options,
    stale_archives,
)
from s3_archive.io.spark import SparkResource


@pytest.fixture
def jar_home(tmp_path, monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))
    d = tmp_path / "jars" / "spark"
    d.mkdir(parents=True)
    (d / "spark-sql-kafka-0-10_2.13-4.0.0.jar").write_bytes(b"jar")
    return d


def test_short_is_c1_only_with_the_serial_collector_and_long_keeps_the_jvms_defaults(jar_home):
    jars = list(jar_home.glob("*.jar"))
    # serial GC: G1 grew the heap of a fresh run with the window (JVM peak 16x window / 1x, docs/benchmarks.md)
    assert driver_java_options("short", jars) == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert driver_java_options("long", jars) == ""


def test_the_cds_archive_is_used_only_once_built(jar_home):
    jars = list(jar_home.glob("*.jar"))
    archive = cds_archive(jars)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"jsa")
    assert driver_java_options("short", jars) == f"{C1_ONLY} {SERIAL_GC} -XX:SharedArchiveFile={archive}"
    assert driver_java_options("long", jars) == f"-XX:SharedArchiveFile={archive}"


def test_a_changed_jar_names_another_archive(jar_home):
    jar = next(jar_home.glob("*.jar"))
    before = classpath_fingerprint([jar])
    jar.write_bytes(b"another jar")
    os.utime(jar, ns=(1, 1))
    assert classpath_fingerprint([jar]) != before
    assert classpath_fingerprint([jar, jar_home / "new.jar"]) != classpath_fingerprint([jar])


def test_only_archives_whose_classpath_is_gone_or_changed_are_stale(jar_home):
    """Another installation's archive (another virtualenv's jars) stays while its files are as they were: setup
    in a CI clone no longer removes the archive of the checkout beside it (which then ran without one)."""
    jar = next(jar_home.glob("*.jar"))
    other = jar_home / "other-installation.jar"
    other.write_bytes(b"jar")
    mine, theirs = cds_archive([jar]), cds_archive([other])
    mine.parent.mkdir(parents=True)
    for archive, files in ((mine, classpath_files([jar])), (theirs, classpath_files([other]))):
        archive.write_bytes(b"jsa")
        classpath_list(archive).write_text("".join(f"{f}\n" for f in files))
    unlisted = mine.with_name("spark-driver-0123456789abcdef0123.jsa")  # from before the lists: unknown files
    unlisted.write_bytes(b"jsa")
    assert stale_archives(mine.parent) == [unlisted]
    other.write_bytes(b"another jar")
    os.utime(other, ns=(1, 1))
    assert stale_archives(mine.parent) == sorted([unlisted, theirs])
    jar.unlink()
    assert stale_archives(mine.parent) == sorted([unlisted, theirs, mine])


def test_an_unknown_profile_names_the_allowed_ones(jar_home):
    with pytest.raises(ValueError, match=r"jvm_profile is 'medium'; allowed: short, long"):
        driver_java_options("medium", [])


def test_spark_resource_passes_the_flags_to_the_driver_only_when_it_starts_one(jar_home):
    assert SparkResource().spark_conf()["spark.driver.extraJavaOptions"] == f"{C1_ONLY} {SERIAL_GC}"
    assert "spark.driver.extraJavaOptions" not in SparkResource(jvm_profile="long").spark_conf()
    assert "spark.driver.extraJavaOptions" not in SparkResource(remote="sc://spark:15002").spark_conf()
    # extra_conf still has the last word
    conf = SparkResource(extra_conf={"spark.driver.extraJavaOptions": "-Xss4m"}).spark_conf()
    assert conf["spark.driver.extraJavaOptions"] == "-Xss4m"
