"""The restore of archives written with the output options (json array format, value decoding with dead letters,
layouts that split windows), refusals of windows that are not restorable, cold storage, and objects over
boto3's 8 MB multipart threshold; real broker, moto server and Spark."""

from __future__ import annotations

import io
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.defs.restore.config import RestoreConfig
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.model.errors import ArchiveIntegrityError, ColdObjectsPending, InvalidRestore
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ColdOptions
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.integration.archive_helpers import archive_config, log, resources
from s3_archive_tests.integration.moto_helpers import moto_transition
from s3_archive_tests.integration.restore.test_restore import body, materialize_restore, restore_metadata
from s3_archive_tests.kafka_helpers import NASTY, consume_all, create_topic, produce
from s3_archive_tests.manifests import hand_manifest

# JSON objects, values that are not (dead letters), and the nasty records of the Archive issue
JSONISH = [b'{"id": 1, "region": "eu"}', b"\xff\xfe not utf-8", b'{"id": 2, "region": "us"}', b"[1, 2]",
           b'{"id": 3, "region": "eu", "x": {"deep": true}}', b"not json", b'{"id": "four", "region": "us"}']


def _records() -> list[tuple[int, bytes | None, bytes | None, list]]:
    out = [(0, f"k{i}".encode(), v, [("i", str(i).encode()), ("dup", None), ("dup", b"")])
           for i, v in enumerate(JSONISH)]
    out += [(0, k, v, h) for k, v, h in NASTY if k != b"big"]  # the 1 MiB one is covered below
    return out + [(0, b"k", b'{"id": 9, "region": "eu"}', [])]


def test_json_array_archive_with_dead_letters_restores_every_record_byte_for_byte(kafka, s3, services, spark,
                                                                                  unique):
    topic = create_topic(kafka, f"rjson-{unique}")
    produced = produce(kafka, topic, _records())
    cfg = archive_config(services.bucket, topic, f"rjson/{unique}/", format="json", compression="gzip",
                         max_records_per_object=3,
                         value_decoding={"type": "json", "on_error": "dead_letter", "column_prefix": "v_"})
    assert cfg.restorable
    window = OffsetWindow(0, 0, len(produced))
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window).manifest
    assert m.restorable is True and m.format == "json" and len(m.objects) > 1
    assert m.undecodable_records > 3 and m.dead_letter_objects
    target = create_topic(kafka, f"rjson-target-{unique}")

    [rep] = restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                            RestoreRequest(topic, target), [window])

    assert [(g.key, g.value, g.headers, g.timestamp_ms) for g in consume_all(kafka, target)[0]] == \
        [body(r) for r in produced]
    assert rep.restored == rep.archived == len(produced) and rep.transactions == 1


LAYOUT = {"template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
          "partition_by": [{"kind": "value", "field": "region"}]}


def test_a_layout_that_splits_windows_and_dead_letters_restore_in_offset_order(kafka, s3, services, spark,
                                                                              spark_resource, unique):
    """Objects per region interleave in offset order, dead letters too: the restore merges them by offset."""
    topic = create_topic(kafka, f"rsplit-{unique}")
    produced = produce(kafka, topic, _records())
    cfg = archive_config(services.bucket, topic, f"rsplit/{unique}/", layout=LAYOUT,
                         value_decoding={"type": "json", "on_error": "dead_letter"})
    window = OffsetWindow(0, 0, len(produced))
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window).manifest
    assert len(m.objects) >= 3 and m.dead_letter_objects  # eu, us, (null) buckets
    res = resources(services, kafka, spark_resource)

    # Read one object after the other, the records go backwards: refused, nothing produced.
    wrong = create_topic(kafka, f"rsplit-wrong-{unique}")
    with pytest.raises(ArchiveIntegrityError, match="does not follow offset .* objects interleave"):
        list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                             RestoreRequest(topic, wrong), [window]))
    assert consume_all(kafka, wrong)[0] == []

    target = create_topic(kafka, f"rsplit-target-{unique}")
    result = materialize_restore(cfg, topic, [window], res, RestoreConfig(target_topic=target))

    assert [(g.key, g.value, g.headers, g.timestamp_ms) for g in consume_all(kafka, target)[0]] == \
        [body(r) for r in produced]
    assert restore_metadata(result)[window.key]["records_restored"] == len(produced)


def _hand_archive(s3, bucket: str, prefix: str, topic: str, window: OffsetWindow, values: list[bytes],
                  storage_class: str = "STANDARD", **manifest_fields) -> Manifest:
    """A Parquet window in our layout, written directly (no Spark): key i, value, one header, timestamp."""
    n = len(values)
    table = pa.table({
        "key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[{"key": "i", "value": b"%d" % i}] for i in range(n)],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "topic": [topic] * n,
        "partition": pa.array([window.partition] * n, pa.int32()),
        "offset": pa.array(range(window.start, window.start + n), pa.int64()),
        "timestamp": pa.array([(1_700_000_000_000 + i) * 1000 for i in range(n)], pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int32()),
    })
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="none", row_group_size=4)
    key = object_key(prefix, topic, window, 0, ".parquet")
    etag = s3.put_object(Bucket=bucket, Key=key, Body=buf.getvalue(), StorageClass=storage_class)["ETag"].strip('"')
    manifest = hand_manifest(topic, window, [{"key": key, "size": buf.tell(), "etag": etag}], record_count=n,
                             min_timestamp_ms=1_700_000_000_000, max_timestamp_ms=1_700_000_000_000 + n - 1,
                             **manifest_fields)
    s3.put_object(Bucket=bucket, Key=manifest_key(prefix, topic, window), Body=manifest.dumps())
    return manifest


def test_an_object_over_the_multipart_threshold_restores(kafka, s3, services, unique):
    """boto3 downloads objects over 8 MB in ranges that may land out of order: the size check must use the end
    of the spooled file, not its position after the last write."""
    topic, prefix = f"rbig-{unique}", f"rbig/{unique}/"
    values = [os.urandom(1 << 20) for _ in range(9)]  # incompressible, uncompressed: the object is over 9 MiB
    window = OffsetWindow(0, 0, len(values))
    m = _hand_archive(s3, services.bucket, prefix, topic, window, values)
    assert m.objects[0].size > 9 << 20
    target = create_topic(kafka, f"rbig-target-{unique}", config={"max.message.bytes": str(2 << 20),
                                                                   "retention.ms": "-1"})

    [rep] = restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(services.bucket, prefix),
                            RestoreRequest(topic, target), [window])

    assert [g.value for g in consume_all(kafka, target)[0]] == values and rep.restored == 9


def test_windows_archived_unrestorable_are_refused_before_producing(kafka, s3, services, unique):
    topic, prefix = f"rnot-{unique}", f"rnot/{unique}/"
    good = OffsetWindow(0, 0, 2)
    _hand_archive(s3, services.bucket, prefix, topic, good, [b"a", b"b"])
    text = OffsetWindow(0, 2, 4)
    _hand_archive(s3, services.bucket, prefix, topic, text, [b"c", b"d"], value_decoding="utf8",
                  restorable=False)
    target = create_topic(kafka, f"rnot-target-{unique}")

    with pytest.raises(InvalidRestore, match=rf"1 of 2 selected windows of topic '{topic}' are not restorable: "
                                             rf"window {text.key}: its values were stored as UTF-8 text"):
        list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(services.bucket, prefix),
                             RestoreRequest(topic, target), [good, text]))
    assert consume_all(kafka, target)[0] == []


def test_cold_windows_are_requested_then_fail_with_a_count_or_wait(kafka, s3, services, unique):
    topic, prefix = f"rcold-{unique}", f"rcold/{unique}/"
    windows = [OffsetWindow(0, 0, 2), OffsetWindow(0, 2, 4), OffsetWindow(0, 4, 6)]
    for w, cls in zip(windows, ["GLACIER", "DEEP_ARCHIVE", "STANDARD"], strict=True):
        _hand_archive(s3, services.bucket, prefix, topic, w, [b"v%d" % i for i in range(w.start, w.end)],
                      storage_class=cls)
    cold_keys = [object_key(prefix, topic, w, 0, ".parquet") for w in windows[:2]]
    target = create_topic(kafka, f"rcold-target-{unique}", config={"retention.ms": "-1"})
    request = RestoreRequest(topic, target)

    def run(cold: ColdOptions) -> list:
        return list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(services.bucket, prefix), request,
                                    windows, cold=cold))

    try:
        # moto's key restores: a key's restore goes IN_PROGRESS at the first status read after it is requested
        # (seconds 0), then RESTORED once `seconds` have passed since.
        moto_transition(services.s3_endpoint_url, {"model_name": "s3::keyrestore",
                                    "transition": {"progression": "time", "seconds": 0}})
        with pytest.raises(ColdObjectsPending, match=rf"2 of 2 objects of topic '{topic}' .* still being restored "
                                                     r"from GLACIER/DEEP_ARCHIVE \(restore requested by this run: "
                                                     r"2; .*Nothing was produced"):
            run(ColdOptions(tier="Bulk", days=3))
        in_progress_since = time.monotonic()
        moto_transition(services.s3_endpoint_url, {"model_name": "s3::keyrestore",
                                    "transition": {"progression": "time", "seconds": 3600}})
        assert all('ongoing-request="true"' in s3.head_object(Bucket=services.bucket, Key=k)["Restore"]
                   for k in cold_keys)
        assert consume_all(kafka, target)[0] == []

        # Waiting: the restores (requested by the first run, not again) finish about 3 s from now while the run
        # polls.
        ready_in = int(time.monotonic() - in_progress_since) + 3
        moto_transition(services.s3_endpoint_url, {"model_name": "s3::keyrestore",
                                    "transition": {"progression": "time", "seconds": ready_in}})
        t0 = time.monotonic()
        reports = run(ColdOptions(wait_seconds=60, poll_seconds=0.5))
        assert time.monotonic() - t0 > 1
    finally:
        moto_transition(services.s3_endpoint_url, None)
    assert [g.value for g in consume_all(kafka, target)[0]] == [b"v%d" % i for i in range(6)]
    assert sum(r.restored for r in reports) == 6
