"""The store check before the first commit (io/store_probe.py) against real servers: moto and versitygw pass it; a
store that ignores the conditional headers (the fault proxy dropping them on the way to moto) is refused, by name
and with what is missing, before anything is written."""

from __future__ import annotations

import boto3
import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.io.s3 import list_objects
from s3_archive.io.store_probe import ensure_conditional_writes, forget_checked, probe_conditional_writes
from s3_archive.local.fault_proxy import IGNORE_CONDITIONS, FaultRule
from s3_archive.model.errors import ConditionalWritesUnsupported
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, log
from s3_archive_tests.kafka_helpers import create_topic, produce


@pytest.fixture
def proxied_s3(fault_proxy):
    """A client of moto through the fault proxy; the proxy's rules cleared and the probe's memory forgotten after."""
    forget_checked()
    yield boto3.client("s3", endpoint_url=fault_proxy.endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                       aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                       aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])
    fault_proxy.clear()
    forget_checked()


def _left_behind(s3, bucket: str, prefix: str) -> list[str]:
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    return [o["Key"] for o in list_objects(s3, bucket, prefix)] + [u["Key"] for u in uploads]


def test_moto_and_versitygw_honour_every_condition_the_commit_relies_on(store, unique):
    s3, prefix = store.client(), f"probe/{unique}/"
    assert probe_conditional_writes(s3, store.bucket, prefix) == []
    assert _left_behind(s3, store.bucket, prefix) == []


def test_a_store_that_ignores_the_conditions_is_refused_with_what_is_missing(proxied_s3, fault_proxy, services,
                                                                            unique):
    fault_proxy.set_rules([FaultRule(IGNORE_CONDITIONS)])
    prefix = f"probe/{unique}/"
    with pytest.raises(ConditionalWritesUnsupported) as e:
        ensure_conditional_writes(proxied_s3, services.bucket, prefix)
    msg = str(e.value)
    assert msg.startswith(f"the S3 store at {fault_proxy.endpoint_url} (bucket {services.bucket!r}) does not honour")
    for missing in ("PutObject with If-None-Match: * on an existing key: the store accepted it",
                    "PutObject with If-Match of another ETag: the store accepted it",
                    "CompleteMultipartUpload with If-None-Match: * on an existing key: the store accepted it",
                    "DeleteObject with If-Match of another ETag: the store accepted it and deleted the object"):
        assert missing in msg
    assert TEST_AWS["AWS_SECRET_ACCESS_KEY"] not in msg
    assert _left_behind(proxied_s3, services.bucket, prefix) == []

    # Refused again next time (not remembered), and only the condition the store ignores is named.
    fault_proxy.set_rules([FaultRule(IGNORE_CONDITIONS, method="DELETE")])
    assert probe_conditional_writes(proxied_s3, services.bucket, prefix) == [
        "DeleteObject with If-Match of another ETag: the store accepted it and deleted the object, where it must "
        "refuse with 412 PreconditionFailed"]


def test_the_archive_refuses_such_a_store_before_writing_and_checks_a_good_one_once(proxied_s3, fault_proxy, kafka,
                                                                                   services, spark, unique):
    topic = create_topic(kafka, f"probe-{unique}")
    produce(kafka, topic, [(0, None, f"{i}".encode(), []) for i in range(10)])
    cfg = archive_config(services.bucket, topic, f"probe/{unique}/")
    window = OffsetWindow(0, 0, 10)
    fault_proxy.set_rules([FaultRule(IGNORE_CONDITIONS)])

    with pytest.raises(ConditionalWritesUnsupported, match="If-None-Match"):
        archive_window(ArchiveContext.of_client(spark, kafka, proxied_s3, log), cfg, topic, window)
    assert _left_behind(proxied_s3, cfg.bucket, cfg.prefix) == []  # no object, no manifest

    fault_proxy.clear()
    ctx = ArchiveContext.of_client(spark, kafka, proxied_s3, log)
    assert archive_window(ctx, cfg, topic, window).outcome == "committed"
    probes = fault_proxy.stats()["requests_by_operation"].get("PUT If-None-Match", 0)
    fault_proxy.reset()
    ensure_conditional_writes(proxied_s3, cfg.bucket, cfg.prefix)  # passed once: not probed again
    assert fault_proxy.stats()["requests"] == 0 and probes >= 2
