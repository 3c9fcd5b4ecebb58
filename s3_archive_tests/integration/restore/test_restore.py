"""The restore against the real broker, moto server and Spark: archive -> restore -> consume, byte for byte,
exactly once across crashes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import dagster as dg
import pytest

from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.defs.restore.assets import build_restore_asset, restore_asset_key
from s3_archive.defs.restore.config import RestoreConfig
from s3_archive.local.stack import LOCAL_AWS
from s3_archive.model.errors import RestoreFailed
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import (
    PRODUCER_CLIENTS,
    PROVENANCE_OFFSET,
    PROVENANCE_PARTITION,
    PROVENANCE_TOPIC,
    Filters,
    RestoreContext,
    RestoreHooks,
    RestoreRequest,
)
from s3_archive.restore.routing import PartitionMapping, murmur2_partition
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.integration.archive_helpers import archive_config, log, materialize, resources
from s3_archive_tests.kafka_helpers import NASTY, Got, Rec, consume_all, create_topic, open_producer, produce
from s3_archive_tests.lineage_events import capture_lineage, read_events, stop_capturing, validate_event
from s3_archive_tests.manifests import hand_manifest


def body(r: Rec) -> tuple:
    return r.key, r.value, tuple(r.headers), r.timestamp_ms


def produce_timed(kafka, topic: str, records: list[tuple[int, bytes | None, bytes | None, list, int]]) -> list[Rec]:
    """Like kafka_helpers.produce, with an explicit CreateTime per record."""
    out: list[Rec] = []

    def report(headers):
        def cb(err, msg):
            assert err is None, err
            out.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(headers), msg.timestamp()[1]))
        return cb

    with open_producer(kafka, **{"enable.idempotence": True, "linger.ms": 5}) as p:
        for part, key, value, headers, ts in records:
            while True:
                try:
                    p.produce(topic, key=key, value=value, partition=part, headers=headers or None, timestamp=ts,
                              on_delivery=report(headers))
                    break
                except BufferError:
                    p.poll(0.1)
            p.poll(0)
        p.flush(60)
    return sorted(out, key=lambda r: (r.partition, r.offset))


def materialize_restore(cfg, topic: str, windows: list[OffsetWindow], res: dict, config: RestoreConfig,
                        instance: dg.DagsterInstance | None = None, raise_on_error: bool = True):
    instance = instance or dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    asset = build_restore_asset(cfg, topic)
    run_config = dg.RunConfig(ops={asset.op.name: config})
    if len(windows) == 1:
        return dg.materialize([asset], instance=instance, resources=res, partition_key=windows[0].key,
                              run_config=run_config, raise_on_error=raise_on_error)
    keys = sorted(w.key for w in windows)
    return dg.materialize([asset], instance=instance, resources=res, run_config=run_config,
                          raise_on_error=raise_on_error,
                          tags={"dagster/asset_partition_range_start": keys[0],
                                "dagster/asset_partition_range_end": keys[-1]})


def failure_text(result) -> str:
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "the run should have failed"
    return "\n".join(str(e.event_specific_data.error.message) + str(e.event_specific_data.error.cause or "")
                     for e in failures)


def restore_metadata(result) -> dict[str, dict]:
    return {e.partition: {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


@pytest.fixture
def res(services, kafka, spark_resource):
    return resources(services, kafka, spark_resource)


# ---- one archive shared by several tests: 3 partitions x 2 windows of 1500 records, explicit timestamps ------

BASE_TS = (int(time.time()) - 86_400) * 1000  # recent: time retention (7 days) must not delete the records
SHARED_PARTITIONS, SHARED_WINDOW, SHARED_WINDOWS_PER_PARTITION = 3, 1500, 2


@dataclass(frozen=True)
class Shared:
    topic: str
    cfg: object
    produced: list[Rec]
    windows: list[OffsetWindow]

    def by_partition(self, p: int) -> list[Rec]:
        return [r for r in self.produced if r.partition == p]


@pytest.fixture(scope="module")
def shared(kafka, services, spark_resource) -> Shared:
    unique = uuid.uuid4().hex[:8]
    topic = create_topic(kafka, f"restore-src-{unique}", partitions=SHARED_PARTITIONS)
    rnd = random.Random(7)
    n = SHARED_PARTITIONS * SHARED_WINDOW * SHARED_WINDOWS_PER_PARTITION
    records = []
    for i in range(n):
        p = i % SHARED_PARTITIONS
        key = None if i % 17 == 0 else f"user-{rnd.randrange(5000)}".encode()
        headers = [("seq", str(i).encode())] + ([("dup", b"a"), ("dup", None)] if i % 5 == 0 else [])
        records.append((p, key, rnd.randbytes(rnd.randrange(0, 200)), headers, BASE_TS + i))
    produced = produce_timed(kafka, topic, records)
    cfg = archive_config(services.bucket, topic, f"restore/{unique}/", format="parquet")
    windows = [OffsetWindow(p, s, s + SHARED_WINDOW) for p in range(SHARED_PARTITIONS)
               for s in range(0, SHARED_WINDOW * SHARED_WINDOWS_PER_PARTITION, SHARED_WINDOW)]
    materialize(cfg, topic, windows, resources(services, kafka, spark_resource))
    return Shared(topic, cfg, produced, windows)


def _restore(kafka, s3, shared: Shared, request: RestoreRequest, windows=None, fault=None) -> list:
    kw = {"hooks": RestoreHooks(fault)} if fault else {}
    return list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(shared.cfg.bucket, shared.cfg.prefix),
                                request, windows or shared.windows, **kw))


# ---- fidelity -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt,codec,provenance,client", [
    ("parquet", "snappy", False, "python"), ("jsonl", "gzip", True, "python"), ("avro", "snappy", False, "python"),
    ("jsonl", "bzip2", False, "python"), ("parquet", "snappy", False, "native"), ("jsonl", "gzip", True, "native")])
def test_round_trip_of_nasty_records_is_byte_exact(fmt, codec, provenance, client, kafka, services, res, unique):
    topic = create_topic(kafka, f"rnasty-{fmt}-{codec}-{unique}")
    produced = produce(kafka, topic, [(0, k, v, h) for k, v, h in NASTY])
    cfg = archive_config(services.bucket, topic, f"rnasty/{unique}/", format=fmt, compression=codec)
    window = OffsetWindow(0, 0, len(NASTY))
    materialize(cfg, topic, [window], res)
    target = create_topic(kafka, f"rnasty-target-{unique}", config={"max.message.bytes": str(8 << 20)})

    result = materialize_restore(cfg, topic, [window], res,
                                 RestoreConfig(target_topic=target, provenance_headers=provenance, producer=client))

    got = consume_all(kafka, target)[0]
    if provenance:
        extra = [(PROVENANCE_TOPIC, topic.encode()), (PROVENANCE_PARTITION, b"0")]
        assert [g.headers[-3:] for g in got] == [tuple(extra + [(PROVENANCE_OFFSET, str(r.offset).encode())])
                                                 for r in produced]
        got = [Got(g.partition, g.offset, g.key, g.value, g.headers[:-3], g.timestamp_ms) for g in got]
    assert [g.body for g in got] == [body(r) for r in produced]
    meta = restore_metadata(result)[window.key]
    assert meta["records_restored"] == len(NASTY) and meta["records_skipped_already_present"] == 0
    assert meta["target_partitions"] == [0] and meta["target_topic"] == target
    assert meta["bytes"] == sum(len(r.key or b"") + len(r.value or b"")
                                + sum(len(k.encode()) + len(v or b"") for k, v in r.headers) for r in produced)


def test_zstd_jsonl_objects_written_by_another_tool_restore(kafka, s3, services, unique):
    """A zstd jsonl object written by hand, as another writer would (not by our commit), restores."""
    import base64

    import pyarrow as pa

    from s3_archive.keys.objects import manifest_key, object_key

    # Old timestamps: without retention.ms=-1 the broker would delete the restored records at once.
    topic, target = f"rzstd-{unique}", create_topic(kafka, f"rzstd-target-{unique}", config={"retention.ms": "-1"})
    window, prefix = OffsetWindow(0, 10, 14), f"rzstd/{unique}/"
    b64 = lambda b: None if b is None else base64.b64encode(b).decode()  # noqa: E731
    rows = [(10, b"k", b"v", [("h", b"1"), ("h", None)], "2023-11-14T22:13:20.001000Z"),
            (11, None, None, [], "2023-11-14T22:13:20.002000Z"),
            (13, b"", b"", None, "2023-11-14T22:13:20.003000+00:00")]
    text = "".join(json.dumps({"key": b64(k), "value": b64(v), "headers": None if h is None else
                               [{"key": n, "value": b64(x)} for n, x in h], "topic": topic, "partition": 0,
                               "offset": o, "timestamp": ts, "timestamp_type": 0}) + "\n"
                   for o, k, v, h, ts in rows).encode()
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as z:
        z.write(text)
    data = sink.getvalue().to_pybytes()
    key = object_key(prefix, topic, window, 0, ".jsonl.zst")
    etag = s3.put_object(Bucket=services.bucket, Key=key, Body=data)["ETag"].strip('"')
    manifest = hand_manifest(topic, window, [{"key": key, "size": len(data), "etag": etag}], format="jsonl",
                             compression="zstd", record_count=3, absent_offsets=[[12, 13]], absent_offset_count=1)
    s3.put_object(Bucket=services.bucket, Key=manifest_key(prefix, topic, window), Body=manifest.dumps())

    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(services.bucket, prefix),
                                   RestoreRequest(topic, target), [window]))

    assert [g.body for g in consume_all(kafka, target)[0]] == [
        (b"k", b"v", (("h", b"1"), ("h", None)), 1_700_000_000_001), (None, None, (), 1_700_000_000_002),
        (b"", b"", (), 1_700_000_000_003)]
    assert reports[0].restored == 3


# ---- many windows, murmur2, exactly once ----------------------------------------------------------------------


def test_backfill_range_with_murmur2_keeps_order_and_a_rerun_skips_everything(kafka, s3, services, res, shared,
                                                                               unique, monkeypatch, tmp_path):
    target = create_topic(kafka, f"rmurmur-{unique}", partitions=4)
    config = RestoreConfig(target_topic=target, partition_mapping="murmur2", provenance_headers=True,
                           transaction_records=700)
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")

    t0 = time.monotonic()
    first = restore_metadata(materialize_restore(shared.cfg, shared.topic, shared.windows, res, config))
    elapsed = time.monotonic() - t0
    _check_restore_lineage(read_events(lineage), shared, kafka, target)
    stop_capturing(monkeypatch)
    again = restore_metadata(materialize_restore(shared.cfg, shared.topic, shared.windows, res, config))

    got = consume_all(kafka, target)
    n = len(shared.produced)
    by_source = {(r.partition, r.offset): r for r in shared.produced}
    seen = Counter()
    for tp, recs in got.items():
        last_per_source: dict[int, int] = {}
        for g in recs:
            sp, so = int(g.header(PROVENANCE_PARTITION)), int(g.header(PROVENANCE_OFFSET))
            src = by_source[(sp, so)]
            assert g.body[:2] == body(src)[:2] and g.headers[:-3] == src.headers
            assert g.timestamp_ms == src.timestamp_ms
            assert tp == (sp % 4 if src.key is None else murmur2_partition(src.key, 4))
            assert so > last_per_source.get(sp, -1), "records of a source partition must keep their order"
            last_per_source[sp] = so
            seen[(sp, so)] += 1
    assert sum(seen.values()) == n and set(seen) == set(by_source) and max(seen.values()) == 1
    assert sum(m["records_restored"] for m in first.values()) == n
    assert all(m["transactions"] >= 2 for m in first.values())
    assert sum(m["records_restored"] for m in again.values()) == 0
    assert sum(m["records_skipped_already_present"] for m in again.values()) == n
    print(f"\nrestore throughput (Dagster run incl. start-up): {n / elapsed:,.0f} records/s "
          f"({n} records, {elapsed:.2f} s); per-window median "
          f"{sorted(m['records_per_second'] for m in first.values())[len(first) // 2]:,.0f} records/s")


def _check_restore_lineage(events: list[dict], shared: Shared, kafka, target: str) -> None:
    """START, then COMPLETE: the archive's S3 location in (each window's offsets and records as archived), the
    target topic out (each window's records restored), validated against the OpenLineage schema."""
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for e in events:
        validate_event(e)
    [source], [out] = events[1]["inputs"], events[1]["outputs"]
    assert (source["namespace"], source["name"]) == (f"s3://{shared.cfg.bucket}", f"{shared.cfg.prefix}{shared.topic}")
    assert (out["namespace"], out["name"]) == (f"kafka://{kafka.bootstrap_servers.split(',')[0]}", target)
    ranges = [{"key": w.key, "partition": w.partition, "startOffset": w.start, "endOffset": w.end,
               "records": SHARED_WINDOW} for w in sorted(shared.windows)]
    assert source["inputFacets"]["s3archive_windows"]["windows"] == ranges
    assert out["outputFacets"]["s3archive_windows"]["windows"] == ranges
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == len(shared.produced)


@pytest.mark.parametrize("client", PRODUCER_CLIENTS)
def test_restore_failing_after_the_first_commit_then_rerun_is_exactly_once(kafka, s3, shared, unique, client):
    target = create_topic(kafka, f"rcrash-{unique}", partitions=SHARED_PARTITIONS)
    # one producer: "the first transaction" is then the run's (two groups could both commit before the crash)
    request = RestoreRequest(shared.topic, target, transaction_records=600, producer=client, producers=1)

    class Crash(Exception):
        pass

    def fault(step: str) -> None:
        if step == "committed:1":
            raise Crash(step)

    with pytest.raises(Crash):
        _restore(kafka, s3, shared, request, fault=fault)
    partial = consume_all(kafka, target)
    assert [len(v) for v in partial.values()] == [600, 0, 0]  # exactly the first transaction

    reports = _restore(kafka, s3, shared, request)

    got = consume_all(kafka, target)
    for p in range(SHARED_PARTITIONS):
        assert [g.body for g in got[p]] == [body(r) for r in shared.by_partition(p)]
    assert sum(r.skipped for r in reports) == 600
    assert sum(r.restored for r in reports) == len(shared.produced) - 600


_KILLED_RESTORE = """
import json, logging, os, signal, sys
import boto3
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreHooks, RestoreRequest
from s3_archive.restore.routing import PartitionMapping
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource

a = json.loads(sys.argv[1])
s3 = boto3.client("s3", endpoint_url=a["endpoint"], **a["aws"])
request = RestoreRequest(a["source"], a["target"], mapping=PartitionMapping.parse(a["mapping"]),
                         transaction_records=a["txn"], producers=a["producers"])

def fault(step):
    if step == a["kill_at"]:
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all: the transaction stays open

for _ in restore_windows(RestoreContext(KafkaResource(bootstrap_servers=a["bootstrap"]), s3, logging.getLogger()),
                         ArchiveSource(a["bucket"], a["prefix"]), request, [OffsetWindow.parse(k) for k in a["windows"]],
                         hooks=RestoreHooks(fault)):
    pass
"""


def test_restore_killed_mid_transaction_then_rerun_is_exactly_once(kafka, s3, services, shared, unique):
    target = create_topic(kafka, f"rkill-{unique}", partitions=2)
    aws = {"region_name": LOCAL_AWS["AWS_REGION"], "aws_access_key_id": LOCAL_AWS["AWS_ACCESS_KEY_ID"],
           "aws_secret_access_key": LOCAL_AWS["AWS_SECRET_ACCESS_KEY"]}
    args = {"endpoint": services.s3_endpoint_url, "aws": aws, "bootstrap": services.bootstrap_servers,
            "bucket": shared.cfg.bucket, "prefix": shared.cfg.prefix, "source": shared.topic, "target": target,
            "mapping": "murmur2", "txn": 1000, "kill_at": "produced:2200", "windows": [w.key for w in shared.windows],
            # one producer: what was committed before the kill is then one group's first two transactions (with two
            # groups in threads, the other may have committed too, depending on the threads' timing)
            "producers": 1}
    proc = subprocess.run([sys.executable, "-c", _KILLED_RESTORE, json.dumps(args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == -9, proc.stderr[-2000:]

    request = RestoreRequest(shared.topic, target, mapping=PartitionMapping.parse("murmur2"), transaction_records=1000,
                             producers=1)
    t0 = time.monotonic()
    reports = _restore(kafka, s3, shared, request)
    elapsed = time.monotonic() - t0

    got = consume_all(kafka, target)
    restored = Counter(g.body for recs in got.values() for g in recs)
    assert restored == Counter(body(r) for r in shared.produced)  # each record exactly once
    # committed before the kill: offsets [0, 2000) of partition 0 in two transactions of 1000 (the second spans
    # its two windows); 200 records were in flight
    assert sum(r.skipped for r in reports) == 2000 and sum(r.restored for r in reports) == len(shared.produced) - 2000
    for tp, recs in got.items():  # per source partition, offset order within each target partition
        seqs = [int(g.header("seq")) for g in recs]
        for sp in range(SHARED_PARTITIONS):
            mine = [s for s in seqs if s % SHARED_PARTITIONS == sp]
            assert mine == sorted(mine)
    print(f"\nrestore throughput (re-run after kill, {sum(r.restored for r in reports)} records): "
          f"{sum(r.restored for r in reports) / elapsed:,.0f} records/s")


# ---- filters, dry run ------------------------------------------------------------------------------------------


def test_offset_filtered_restore_then_unfiltered_one_completes_it_once(kafka, s3, shared, unique):
    target = create_topic(kafka, f"rfilter-{unique}", partitions=SHARED_PARTITIONS)
    part = _restore(kafka, s3, shared, RestoreRequest(shared.topic, target, filters=Filters(from_offset=500,
                                                                                            to_offset=1500)))
    assert sum(r.restored for r in part) == 3 * 1000
    rest = _restore(kafka, s3, shared, RestoreRequest(shared.topic, target))
    assert sum(r.skipped for r in rest) == 3000

    got = consume_all(kafka, target)
    for p in range(SHARED_PARTITIONS):
        src = shared.by_partition(p)
        # first the filtered run's [500, 1500), then everything else, each once
        assert [g.body for g in got[p]] == [body(r) for r in src[500:1500] + src[:500] + src[1500:]]

    # A time filter: its own ledger, only records with timestamp in [from, to).
    target2 = create_topic(kafka, f"rtime-{unique}")
    lo, hi = BASE_TS + 3000, BASE_TS + 3300
    reports = _restore(kafka, s3, shared, RestoreRequest(shared.topic, target2, mapping=PartitionMapping.parse(
        "map", {"0": 0, "1": 0, "2": 0}), filters=Filters(from_timestamp_ms=lo, to_timestamp_ms=hi)))
    got2 = consume_all(kafka, target2)[0]
    assert sorted(g.timestamp_ms for g in got2) == list(range(lo, hi))
    untouched = [r for r in reports if r.restored == 0]
    assert len(untouched) == 3 and all(r.filtered == r.archived for r in untouched)  # pruned via the manifest


def test_dry_run_produces_nothing_and_reports_counts_per_target_partition(kafka, services, res, shared, unique):
    target = create_topic(kafka, f"rdry-{unique}", partitions=2)
    windows = shared.windows[:2]  # partition 0, offsets [0, 3000)
    result = materialize_restore(shared.cfg, shared.topic, windows, res,
                                 RestoreConfig(target_topic=target, partition_mapping="murmur2", dry_run=True))

    assert kafka.offsets(target, "latest") == {0: 0, 1: 0}
    assert result.get_asset_materialization_events() == []
    obs = {e.event_specific_data.asset_observation.partition: e.event_specific_data.asset_observation.metadata
           for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"
           and e.event_specific_data.asset_observation.partition is not None}  # not the run's plan
    assert sorted(obs) == sorted(w.key for w in windows)
    src = shared.by_partition(0)
    expected = Counter(0 if r.key is None else murmur2_partition(r.key, 2) for r in src)
    counted = Counter()
    for meta in obs.values():
        assert meta["dry_run"].value is True
        for p, c in meta["per_target_partition"].value.items():
            counted[int(p)] += c["records"]
    assert counted == expected
    assert sum(m["bytes"].value for m in obs.values()) == sum(
        len(r.key or b"") + len(r.value or b"") + sum(len(k) + len(v or b"") for k, v in r.headers) for r in src)


# ---- murmur2 against a real producer ---------------------------------------------------------------------------


def test_murmur2_agrees_with_a_real_producers_partition_choice(kafka, unique):
    topic = create_topic(kafka, f"rhash-{unique}", partitions=7)
    rnd = random.Random(11)
    keys = [f"key-{i}".encode() for i in range(100)] + [rnd.randbytes(rnd.randrange(1, 40)) for _ in range(100)]
    keys += [b"\x00", b"\xff\xff\xff\xff", "ключ".encode()]
    chosen: dict[bytes, int] = {}

    def report(err, msg):
        assert err is None, err
        chosen[msg.key()] = msg.partition()

    with open_producer(kafka, partitioner="murmur2_random") as producer:
        for k in keys:
            producer.produce(topic, key=k, value=b"", on_delivery=report)  # no partition: the partitioner decides
        producer.flush(30)

    assert len(chosen) == len(set(keys))
    assert {k: murmur2_partition(k, 7) for k in chosen} == chosen
    assert len(set(chosen.values())) == 7


# ---- clear errors ----------------------------------------------------------------------------------------------


def test_wrong_restores_fail_clearly_before_producing(kafka, services, res, shared, unique):
    own = materialize_restore(shared.cfg, shared.topic, shared.windows[:1], res,
                              RestoreConfig(target_topic=shared.topic), raise_on_error=False)
    assert f"target topic '{shared.topic}' is the archived topic itself" in failure_text(own)
    assert "allow_source_topic" in failure_text(own)

    target = create_topic(kafka, f"rerr-{unique}", partitions=2)
    not_archived = OffsetWindow(0, 9000, 10000)
    missing = materialize_restore(shared.cfg, shared.topic, [not_archived], res,
                                  RestoreConfig(target_topic=target), raise_on_error=False)
    assert f"window {not_archived.key} of topic '{shared.topic}' is not archived yet" in failure_text(missing)

    too_small = materialize_restore(shared.cfg, shared.topic, [shared.windows[-1]], res,
                                    RestoreConfig(target_topic=target), raise_on_error=False)
    assert f"source partition 2 has no same-numbered partition in target topic '{target}'" \
        in failure_text(too_small)

    bad_map = materialize_restore(shared.cfg, shared.topic, shared.windows[:1], res,
                                  RestoreConfig(target_topic=target, partition_mapping="map", partition_map={"0": 5}),
                                  raise_on_error=False)
    assert f"sends source partition 0 to partition 5, but target topic '{target}' has 2 partitions" \
        in failure_text(bad_map)

    ghost = materialize_restore(shared.cfg, shared.topic, shared.windows[:1], res,
                                RestoreConfig(target_topic=f"ghost-{unique}"), raise_on_error=False)
    assert f"target topic 'ghost-{unique}' does not exist" in failure_text(ghost)
    assert kafka.offsets(target, "latest") == {0: 0, 1: 0}
    assert restore_asset_key(shared.topic).path == ["kafka_restore", shared.topic]


@pytest.mark.parametrize("client", PRODUCER_CLIENTS)
def test_a_second_run_of_the_same_restore_fences_the_first(kafka, s3, shared, unique, client):
    target = create_topic(kafka, f"rfence-{unique}", partitions=SHARED_PARTITIONS)
    # one producer: the first run then waits between windows while its caller does (groups run on in threads)
    request = RestoreRequest(shared.topic, target, transaction_records=500, producer=client, producers=1)
    first_run = restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(shared.cfg.bucket, shared.cfg.prefix),
                                request, shared.windows)
    first_window = next(first_run)  # committed; the first run now waits between windows

    second = _restore(kafka, s3, shared, request)  # its init_transactions fences the first run

    with pytest.raises(RestoreFailed, match="the restore was fenced: another run of the same restore"):
        list(first_run)
    got = consume_all(kafka, target)
    for p in range(SHARED_PARTITIONS):
        assert [g.body for g in got[p]] == [body(r) for r in shared.by_partition(p)]
    assert sum(r.skipped for r in second) == first_window.restored == SHARED_WINDOW


@pytest.mark.parametrize("client", PRODUCER_CLIENTS)
def test_a_record_the_target_refuses_aborts_the_transaction_and_nothing_is_visible(kafka, s3, shared, unique,
                                                                                   client):
    # Values are up to 200 bytes; the target accepts batches of at most 150 bytes: some records must fail.
    target = create_topic(kafka, f"rrefuse-{unique}", partitions=SHARED_PARTITIONS,
                          config={"max.message.bytes": "150"})
    request = RestoreRequest(shared.topic, target, transaction_records=100_000, producer=client)

    # The broker's refusal surfaces either on a later produce (the transaction is then in error) or at commit.
    with pytest.raises(RestoreFailed, match=f"(committing a restore transaction to|producing to) '{target}' failed"):
        _restore(kafka, s3, shared, request, windows=shared.windows[:1])

    assert all(v == [] for v in consume_all(kafka, target).values())
