"""The `erase` job's launchpad config, as the request it runs."""

import pytest

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.erase_job import EraseConfig, PredicateConfig, build_erase_job
from s3_archive.erasure.erasure import EraseRequest, FieldEquals
from s3_archive.model.errors import ErasureRefused


def test_the_erase_jobs_config_becomes_a_request():
    assert EraseConfig(topic="t", key="a", keys=["b"]).request() == EraseRequest("t", (b"a", b"b"))
    assert EraseConfig(topic="t", predicate=PredicateConfig(field="n", equals="42")).request() == EraseRequest(
        "t", predicate=FieldEquals("n", 42))
    with pytest.raises(ErasureRefused, match="exactly one of the two"):
        EraseConfig(topic="t").request()
    assert EraseConfig(topic="t", keys_hex=["00ff10"], keys_base64=["AP8Q", "aGk="]).request() == EraseRequest(
        "t", (b"\x00\xff\x10", b"\x00\xff\x10", b"hi"))
    with pytest.raises(ErasureRefused, match=r"key '0g' is not hex: a hex key is hexadecimal digits, two per byte"):
        EraseConfig(topic="t", keys_hex=["0g"]).request()
    with pytest.raises(ErasureRefused, match=r"key 'AP8' is not base64: .* padded with ="):
        EraseConfig(topic="t", keys_base64=["AP8"]).request()


def test_the_erase_job_takes_spark_when_an_archive_is_an_iceberg_table():
    parquet = ArchiveConfig(name="a", topics=["t"], bucket="bkt")
    iceberg = ArchiveConfig(name="i", topics=["u"], bucket="bkt", format="iceberg")
    assert build_erase_job(Settings(archives=[parquet])).required_resource_keys - {"io_manager"} == {"s3"}
    assert build_erase_job(Settings(archives=[parquet, iceberg])).required_resource_keys - {"io_manager"} == {"s3", "spark"}
