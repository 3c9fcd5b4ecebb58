"""The S3 requests of archive runs, counted by kind on the real moto server (through the S3 fault proxy, which only
counts here: no rule is set), at make bench's shape: four partitions, one window each, two slices (objects) a window,
one run through the archive asset. The counts are exact, so a request added back fails here; each kind's source is
docs/commit-protocol.md, "S3 calls per window"."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF
from s3_archive.io.store_probe import forget_checked
from s3_archive.keys.objects import MANIFESTS, SCHEMAS, STORE_PROBE
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, materialize, window_metadata
from s3_archive_tests.kafka_helpers import create_topic, produce
from s3_archive_tests.reliability import proxied_s3

PARTITIONS, RECORDS = 4, 20  # records per partition and window


@pytest.fixture
def proxy(fault_proxy):
    fault_proxy.clear()
    yield fault_proxy
    fault_proxy.clear()


def _kinds(calls: list[tuple[str, str, str]], bucket: str, prefix: str, topic: str) -> Counter:
    """Each request by what it is for, from its operation and key (or a listing's prefix)."""
    manifests, data, probe = f"{prefix}{MANIFESTS}/{topic}/", f"{prefix}{topic}/", f"{prefix}{STORE_PROBE}/"
    out: Counter = Counter()
    for op, path, listed in calls:
        key = path.removeprefix(f"/{bucket}/") if path.startswith(f"/{bucket}/") else ""
        if key.startswith(probe) or listed.startswith(probe):
            out["store check"] += 1
        elif op == "GET ?list-type":
            out["LIST manifests" if listed.startswith(manifests) else
                "LIST window objects" if listed.startswith(data) else f"LIST {listed}"] += 1
        elif op == "GET ?uploads":
            out["LIST open uploads"] += 1
        elif key.startswith(manifests):
            out[f"{op} manifest"] += 1
        elif key.startswith(data):
            out[f"{op} object"] += 1
        else:
            out[f"{op} {path}"] += 1
    return out


def test_a_run_makes_objects_plus_at_most_four_requests_a_window(kafka, spark_resource, services, proxy, unique):
    topic = create_topic(kafka, f"requests-{unique}", partitions=PARTITIONS)
    cfg = archive_config(services.bucket, topic, f"requests/{unique}/")
    res = {"kafka": kafka, "spark": spark_resource, "s3": proxied_s3(proxy)}
    session = spark_resource.session()
    session.conf.set(KAFKA_MIN_PARTITIONS_CONF, "2")  # two slices a window, as make bench's windows are cut

    def run(windows: list[OffsetWindow]) -> tuple[Counter, dict[str, dict]]:
        proxy.reset()
        meta = window_metadata(materialize(cfg, topic, windows, res))
        return _kinds(proxy.calls(), cfg.bucket, cfg.prefix, topic), meta

    try:
        produce(kafka, topic, [(p, f"{i}".encode(), b"v" * 50, []) for i in range(RECORDS) for p in range(PARTITIONS)])
        first = [OffsetWindow(p, 0, RECORDS) for p in range(PARTITIONS)]
        forget_checked()  # this process checks the store once per endpoint and bucket: in the first run
        counted, meta = run(first)
        assert counted.pop("store check") >= 7
        assert [m["objects"] for m in meta.values()] == [2] * PARTITIONS
        assert counted == {
            "LIST manifests": 4,  # one per partition before the write: step 0, the bucket check, the chain
            "PUT If-None-Match object": 8,  # the objects, two a window
            "LIST open uploads": 1,  # once per run
            "LIST window objects": 4,  # each window's keys before its commit (strays, ETags)
            "PUT If-None-Match manifest": 4,  # the commits; windows at offset 0 link to nothing, group offsets
        }  # settled by the high watermark (each window ends there): no listing
        assert sum(counted.values()) <= (2 + 4) * len(first)

        produce(kafka, topic, [(p, f"{i}".encode(), b"w" * 50, []) for i in range(RECORDS) for p in range(PARTITIONS)])
        second = [OffsetWindow(p, RECORDS, 2 * RECORDS) for p in range(PARTITIONS)]
        counted, meta = run(second)  # the store is checked no more in this process
        assert [m["outcome"] for m in meta.values()] == ["committed"] * PARTITIONS
        assert counted == {"LIST manifests": 4, "GET manifest": 4,  # the listing shows the previous window: read
                           "PUT If-None-Match object": 8, "LIST open uploads": 1, "LIST window objects": 4,
                           "PUT If-None-Match manifest": 4}

        counted, meta = run(first)  # committed already: read and checked, nothing written
        assert [m["outcome"] for m in meta.values()] == ["already_committed"] * PARTITIONS
        assert counted == {"LIST manifests": 4, "GET manifest": 4, "HEAD object": 8}
    finally:
        session.conf.unset(KAFKA_MIN_PARTITIONS_CONF)


def test_a_decoding_run_puts_each_schema_once_not_once_a_window(kafka, spark_resource, services, proxy,
                                                                   registry_server, unique):
    """With Schema Registry decoding the schemas the windows used are kept in the bucket (step 5): one PUT per schema
    and run (registry_plan.py::SchemasKept), however many of the run's windows used it and commit side by side."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from s3_archive.io.schema_registry import SchemaRegistryResource

    topic = create_topic(kafka, f"requests-sr-{unique}", partitions=PARTITIONS)
    schema = {"type": "record", "name": "Count", "fields": [{"name": "n", "type": "long"}]}
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_server.url, "timeout": 10}), json.dumps(schema))
    into = SerializationContext(topic, MessageField.VALUE)
    produce(kafka, topic, [(p, None, ser({"n": i}, into), []) for i in range(RECORDS) for p in range(PARTITIONS)])
    cfg = archive_config(services.bucket, topic, f"requests-sr/{unique}/", value_decoding={"type": "avro"})
    res = {"kafka": kafka, "spark": spark_resource, "s3": proxied_s3(proxy),
           "schema_registry": SchemaRegistryResource(url=registry_server.url)}
    proxy.reset()
    meta = window_metadata(materialize(cfg, topic, [OffsetWindow(p, 0, RECORDS) for p in range(PARTITIONS)], res))
    assert [m["outcome"] for m in meta.values()] == ["committed"] * PARTITIONS
    kept = f"/{cfg.bucket}/{cfg.prefix}{SCHEMAS}/"
    assert [op for op, path, _ in proxy.calls() if path.startswith(kept)] == ["PUT If-None-Match"]
    counted = _kinds(proxy.calls(), cfg.bucket, cfg.prefix, topic)
    counted.pop("store check", None)  # once per process and bucket: in whichever test ran first
    assert {k: v for k, v in counted.items() if not k.startswith("PUT If-None-Match /")} == {
        "LIST manifests": 4, "PUT If-None-Match object": 4, "LIST open uploads": 1, "LIST window objects": 4,
        "PUT If-None-Match manifest": 4}
