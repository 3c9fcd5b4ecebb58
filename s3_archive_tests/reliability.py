"""One seeded fault round, shared by the `reliability` tests and bench/reliability.py: produce, archive several
windows and restore them with boto3 going through the S3 fault proxy, re-run what failed (as a user would from the
UI), then check with a direct client: every window committed once, nothing stray, the restored records byte-exact,
none lost and none duplicated."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections import Counter
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.archive.protocol import S3Connection
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import list_objects, read_manifest
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.objects import manifest_key
from s3_archive.local.fault_proxy import FaultProxy, mixed
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.kafka_helpers import create_topic, produce

log = logging.getLogger("s3_archive_tests.reliability")
RERUNS = 3  # runs after the first, for what a run failed (a user's re-run from the UI)


def proxied_s3(proxy: FaultProxy, max_attempts: int = 8, retry_mode: str = "standard") -> S3Resource:
    return S3Resource(endpoint_url=proxy.endpoint_url, region_name=TEST_AWS["AWS_REGION"], path_style=True,
                      aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"], max_attempts=max_attempts,
                      retry_mode=retry_mode)


def consume(kafka: KafkaResource, topic: str) -> list[tuple]:
    """Every committed record of `topic` (read_committed) as (partition, key, value, headers, timestamp)."""
    parts = kafka.partitions(topic)
    ends = kafka.offsets(topic, "latest")
    pending = {p for p in parts if ends[p] > 0}
    out: list[tuple] = []
    c = Consumer(kafka.client_config(**{"group.id": f"verify-{uuid.uuid4().hex}", "enable.auto.commit": False,
                                        "isolation.level": "read_committed", "enable.partition.eof": True}))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            out.append((msg.partition(), msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1]))
    finally:
        c.close()
    return out


def fault_round(spark: Any, kafka: KafkaResource, direct_s3: Any, proxy: FaultProxy, bucket: str, seed: int,
                share: float = 0.10, partitions: int = 2, windows_per_partition: int = 3, records: int = 60,
                fmt: str = "parquet") -> dict[str, Any]:
    """Archive + restore through the proxy at `share` mixed faults (seeded); what happened and what was checked."""
    rng = random.Random(seed)
    unique = f"{seed}-{uuid.uuid4().hex[:6]}"
    topic = create_topic(kafka, f"faults-{unique}", partitions=partitions)
    produced = produce(kafka, topic, [
        (p, rng.choice([None, rng.randbytes(rng.randint(0, 20))]), rng.choice([None, rng.randbytes(rng.randint(0,
         3000))]), [("h", rng.choice([None, rng.randbytes(4)]))] if rng.random() < 0.5 else [])
        for p in range(partitions) for _ in range(records)])
    step = records // windows_per_partition
    windows = [OffsetWindow(p, i * step, records if i == windows_per_partition - 1 else (i + 1) * step)
               for p in range(partitions) for i in range(windows_per_partition)]
    cfg = ArchiveConfig(name="faults", topics=[topic], bucket=bucket, prefix=f"faults/{unique}/", format=fmt,
                        max_records_per_object=max(1, step // 2))
    res = proxied_s3(proxy)
    s3 = res.get_client()
    proxy.set_rules(mixed(share), seed=seed)
    proxy.reset()
    t0 = time.monotonic()

    outcomes: Counter = Counter()
    archive_runs, todo = 0, list(windows)
    errors: list[str] = []
    while todo and archive_runs <= RERUNS:
        archive_runs += 1
        ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_resource(res), S3Endpoint.of_client(s3), log)
        results = archive_windows(ctx, cfg, topic, todo)
        todo = [w for w, r in results.items() if isinstance(r, BaseException)]
        errors += [f"{type(r).__name__}: {str(r)[:200]}" for r in results.values() if isinstance(r, BaseException)]
        outcomes.update(r.outcome for r in results.values() if not isinstance(r, BaseException))

    target = create_topic(kafka, f"faults-restored-{unique}", partitions=partitions)
    restore_runs, restored_ok = 0, False
    while not restored_ok and restore_runs <= RERUNS and not todo:
        restore_runs += 1
        try:
            list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(bucket, cfg.prefix),
                                 RestoreRequest(topic, target), windows))
            restored_ok = True
        except Exception as e:  # a re-run resumes from the ledger
            errors.append(f"restore {type(e).__name__}: {str(e)[:200]}")
    seconds = time.monotonic() - t0
    stats = proxy.stats()
    proxy.clear()

    # Checks, with a client that bypasses the proxy.
    manifests = {w: read_manifest(direct_s3, bucket, manifest_key(cfg.prefix, topic, w)) for w in windows}
    listed = {o["Key"] for o in list_objects(direct_s3, bucket, f"{cfg.prefix}{topic}/")}
    in_manifests = {o.key for m in manifests.values() if m is not None for o in m.all_objects}
    open_uploads = direct_s3.list_multipart_uploads(Bucket=bucket, Prefix=cfg.prefix).get("Uploads", [])
    want = Counter((r.partition, r.key, r.value, r.headers, r.timestamp_ms) for r in produced)
    got = Counter(consume(kafka, target))
    return {
        "seed": seed, "share": share, "windows": len(windows), "records": len(produced), "format": fmt,
        "seconds": round(seconds, 1), "requests": stats["requests"], "faults": stats["faults"],
        "faults_by_operation": stats["faults_by_operation"], "archive_runs": archive_runs,
        "restore_runs": restore_runs, "outcomes": dict(outcomes), "errors": errors,
        "uncommitted_windows": sum(m is None for m in manifests.values()),
        "stray_objects": sorted(listed - in_manifests), "missing_objects": sorted(in_manifests - listed),
        "open_uploads": len(open_uploads),
        "lost": sum((want - got).values()), "duplicated": sum((got - want).values()),
        "byte_exact": got == want,
    }
