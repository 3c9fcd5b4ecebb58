"""The `erase` job's launchpad config, as the request it runs."""

import pytest

from s3_archive.defs.archive.erase_job import EraseConfig, PredicateConfig
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
