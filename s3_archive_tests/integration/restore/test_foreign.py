"""Restore from objects laid out as Kafka Connect S3 sinks write them (Aiven, Confluent), written here with
boto3/fastavro to the moto server, into the real broker; cold storage (GLACIER) against moto."""

from __future__ import annotations

import base64
import gzip
import io
import json
import logging
import time
from datetime import UTC, datetime

import dagster as dg
import fastavro

from s3_archive.config.foreign import ForeignSource
from s3_archive.defs.restore.config import ForeignRestoreConfig
from s3_archive.defs.restore.foreign_assets import build_foreign_restore_asset
from s3_archive.restore.cold import ColdReport
from s3_archive.restore.foreign_sources import restore_foreign
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive_tests.integration.archive_helpers import resources
from s3_archive_tests.integration.moto_helpers import moto_transition
from s3_archive_tests.kafka_helpers import consume_all, create_topic

log = logging.getLogger("s3_archive_tests")
TS = 1_700_000_000_000


def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def aiven_jsonl(recs: list[tuple]) -> bytes:
    """Aiven's jsonl writer: key/value/header values base64 (ByteArrayConverter), timestamp ISO_INSTANT."""
    return "\n".join(json.dumps({"key": b64(k), "value": b64(v), "offset": o, "timestamp": iso(ts),
                                 "headers": [{"key": n, "value": b64(x)} for n, x in hs]})
                     for o, k, v, hs, ts in recs).encode() + b"\n"


def reports(gen) -> tuple[ColdReport, list]:
    out = list(gen)
    return out[0], out[1:]


def test_aiven_objects_restore_exactly_once_and_pick_up_new_objects(kafka, s3, services, unique):
    source = ForeignSource(name="aiven_jsonl", layout="aiven", bucket=services.bucket, prefix=f"aiven/{unique}/",
                           topic="orders", format="jsonl", compression="gzip",
                           template="{{topic}}-{{partition:padding=true}}-{{start_offset:padding=true}}",
                           fields=["key", "value", "offset", "timestamp", "headers"])
    # Partition 0: two objects (offsets with a gap, as after compaction or transaction markers); partition 1: one.
    objects = {
        (0, 0): [(0, b"\x00k", b"\xff\x00v", [("dup", b"1"), ("dup", b"2")], TS), (1, None, b"no key", [], TS + 1),
                 (3, b"tomb", None, [("e", b"")], TS + 2)],
        (0, 4): [(4, b"", b"", [], TS + 3), (5, "ключ".encode(), "значение".encode(), [("ü", b"\x01")], TS + 4)],
        (1, 10): [(10, b"p1", b"v10", [], TS + 5), (11, b"p1", b"v11", [], TS + 6)],
    }

    def put(p: int, start: int) -> None:
        key = f"{source.key_prefix}orders-{p:010d}-{start:020d}.gz"
        s3.put_object(Bucket=services.bucket, Key=key, Body=gzip.compress(aiven_jsonl(objects[(p, start)])))

    for p, start in objects:
        put(p, start)
    s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}other-0000000000-00000000000000000000.gz",
                  Body=b"another topic: ignored")
    target = create_topic(kafka, f"faiven-{unique}", partitions=2, config={"retention.ms": "-1"})
    request = RestoreRequest("orders", target, provenance_headers=True)

    cold, first = reports(restore_foreign(RestoreContext(kafka, s3, log), source, request))

    assert cold.cold == 0 and sum(r.restored for r in first) == 7
    got = consume_all(kafka, target)
    for p in (0, 1):
        want = [(k, v, tuple(hs), ts, str(o).encode()) for (sp, _), recs in sorted(objects.items()) if sp == p
                for o, k, v, hs, ts in recs]
        assert [(g.key, g.value, g.headers[:-3], g.timestamp_ms, g.header("s3archive.source.offset")) for g in got[p]] \
            == want

    # A re-run restores nothing; the sink then adds an object and the next run restores only that one.
    _, again = reports(restore_foreign(RestoreContext(kafka, s3, log), source, request))
    assert sum(r.restored for r in again) == 0 and sum(r.skipped for r in again) == 7
    objects[(0, 6)] = [(6, b"new", b"v6", [], TS + 7)]
    put(0, 6)
    _, third = reports(restore_foreign(RestoreContext(kafka, s3, log), source, request))
    assert sum(r.restored for r in third) == 1
    assert [g.value for g in consume_all(kafka, target)[0]][-2:] == ["значение".encode(), b"v6"]


def test_confluent_avro_values_with_keys_sibling_restore(kafka, s3, services, unique):
    source = ForeignSource(name="confluent_avro", layout="confluent", bucket=services.bucket,
                           prefix=f"confluent/{unique}/topics", topic="clicks", format="avro")
    base = f"{source.key_prefix}clicks/partition=0/clicks+0+"

    def avro(values: list) -> bytes:  # the AvroFormat of ByteArrayConverter data: a container of bytes
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(["null", "bytes"]), values)
        return buf.getvalue()

    s3.put_object(Bucket=services.bucket, Key=base + "0000000000.avro", Body=avro([b"c0", b"c1", None]))
    s3.put_object(Bucket=services.bucket, Key=base + "0000000000.keys.avro", Body=avro([b"k0", None, b"k2"]))
    s3.put_object(Bucket=services.bucket, Key=base + "0000000003.avro", Body=avro([b"c3"]))
    target = create_topic(kafka, f"fconfluent-{unique}")

    before = time.time() * 1000
    _, reps = reports(restore_foreign(RestoreContext(kafka, s3, log), source,
                                      RestoreRequest("clicks", target, provenance_headers=True)))

    got = consume_all(kafka, target)[0]
    assert [(g.key, g.value, g.header("s3archive.source.offset")) for g in got] == [
        (b"k0", b"c0", b"0"), (None, b"c1", b"1"), (b"k2", None, b"2"), (None, b"c3", b"3")]
    # The layout carries no timestamps: the producer stamps the records (counted, documented).
    assert all(g.timestamp_ms >= before - 1000 for g in got) and sum(r.timestamps_replaced for r in reps) == 4


def test_cold_objects_are_restored_first_then_fail_or_wait(kafka, s3, services, unique):
    source = ForeignSource(name="cold", layout="aiven", bucket=services.bucket, prefix=f"cold/{unique}/",
                           topic="t", format="csv", fields=["value", "offset"], cold_restore_tier="Bulk")
    for start, cls in [(0, "GLACIER"), (2, "DEEP_ARCHIVE"), (4, "GLACIER_IR")]:
        body = f"{b64(b'v%d' % start)},{start}\n{b64(b'v%d' % (start + 1))},{start + 1}".encode()
        s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}t-0-{start}", Body=body, StorageClass=cls)
    target = create_topic(kafka, f"fcold-{unique}")
    res = {k: v for k, v in resources(services, kafka, None).items() if k != "spark"}
    asset = build_foreign_restore_asset(source)

    def run(**cfg) -> dg.ExecuteInJobResult:
        return dg.materialize([asset], resources=res, raise_on_error=False,
                              run_config=dg.RunConfig(ops={asset.op.name: ForeignRestoreConfig(target_topic=target,
                                                                                                **cfg)}))

    try:
        # Restores that stay in progress: moto moves a key's restore one step per status read after `seconds`.
        moto_transition(services.s3_endpoint_url, {"model_name": "s3::keyrestore",
                                    "transition": {"progression": "time", "seconds": 0}})
        for start in (0, 2):
            key = f"{source.key_prefix}t-0-{start}"
            s3.restore_object(Bucket=services.bucket, Key=key, RestoreRequest={"Days": 1})
            assert 'ongoing-request="true"' in s3.head_object(Bucket=services.bucket, Key=key)["Restore"]
        moto_transition(services.s3_endpoint_url, {"model_name": "s3::keyrestore",
                                    "transition": {"progression": "time", "seconds": 3600}})
        failed = run()
        assert not failed.success
        message = failed.failure_data_for_node(asset.op.name).user_failure_data.description
        assert "ColdObjectsPending: 2 of 2 objects" in message and "Nothing was produced" in message
        assert consume_all(kafka, target)[0] == []

        # Waiting: the restores finish (2 s later here) while the run polls.
        moto_transition(services.s3_endpoint_url, {"model_name": "s3::keyrestore",
                                    "transition": {"progression": "time", "seconds": 2}})
        done = run(wait_for_cold_seconds=60)
        assert done.success
        meta = {k: v.value for k, v in done.get_asset_materialization_events()[0].materialization.metadata.items()}
        assert meta["cold_objects"] == 2 and meta["cold_restores_requested"] == 0
        assert meta["records_restored"] == 6
        assert [g.value for g in consume_all(kafka, target)[0]] == [b"v%d" % i for i in range(6)]
    finally:
        moto_transition(services.s3_endpoint_url, None)

    # Never requested: the run requests the restore itself (moto completes it at once by default).
    key = f"{source.key_prefix}t-0-6"
    s3.put_object(Bucket=services.bucket, Key=key, Body=f"{b64(b'v6')},6".encode(), StorageClass="DEEP_ARCHIVE")
    assert "Restore" not in s3.head_object(Bucket=services.bucket, Key=key)
    third = run()
    assert third.success
    assert "Restore" in s3.head_object(Bucket=services.bucket, Key=key)
    meta = {k: v.value for k, v in third.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["cold_restores_requested"] == 1 and meta["records_restored"] == 1


def test_objects_with_out_of_range_names_and_strays_are_listed_as_ignored_and_the_rest_restores(
        kafka, s3, services, unique):
    source = ForeignSource(name="aiven_odd", layout="aiven", bucket=services.bucket, prefix=f"aiven-odd/{unique}/",
                           topic="orders", format="jsonl", fields=["key", "value", "offset", "timestamp", "headers"])
    good = {(0, 0): [(0, b"k0", b"v0", [], TS), (1, b"k1", b"v1", [], TS + 1)], (1, 7): [(7, None, b"v7", [], TS)]}
    for (p, start), recs in good.items():
        s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}orders-{p}-{start}", Body=aiven_jsonl(recs))
    beyond = {"orders-0-9223372036854775808": "start offset 9223372036854775808 is beyond",
              "orders-2147483648-0": "partition 2147483648 is beyond 2147483647, Kafka's largest partition"}
    strays = ["orders-0-5.tmp", "_SUCCESS", "orders/0/x;`drop table`"]
    for name in [*beyond, *strays]:  # well-formed records: only the names are bad
        s3.put_object(Bucket=services.bucket, Key=source.key_prefix + name, Body=aiven_jsonl(good[(0, 0)]))
    # The records are from 2023: under the broker's default retention (7 days) they are deleted within a second
    # or two of their commit (the next append rolls a segment that old; retention is checked every second here).
    target = create_topic(kafka, f"fodd-{unique}", partitions=2, config={"retention.ms": "-1"})
    asset = build_foreign_restore_asset(source)
    res = {k: v for k, v in resources(services, kafka, None).items() if k != "spark"}
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([asset], resources=res, instance=instance, run_config=dg.RunConfig(
        ops={asset.op.name: ForeignRestoreConfig(target_topic=target)}))

    got = consume_all(kafka, target)
    assert [(g.key, g.value) for g in got[0]] == [(b"k0", b"v0"), (b"k1", b"v1")]
    assert [(g.key, g.value) for g in got[1]] == [(None, b"v7")]
    meta = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["windows"] == 2 and meta["records_restored"] == 3 and meta["ignored_objects"] == 5
    shown = meta["ignored"]
    assert set(shown) == {source.key_prefix + n for n in [*beyond, *strays]}
    assert list(shown)[:2] == [source.key_prefix + n for n in beyond]  # out-of-range names first
    for name, why in beyond.items():
        assert shown[source.key_prefix + name].startswith("out of range: ") and why in shown[source.key_prefix + name]
    warnings = [e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.WARNING]
    for name in beyond:
        assert any(f"ignoring s3://{services.bucket}/{source.key_prefix}{name}: out of range" in w
                   for w in warnings), warnings


def test_a_sinks_records_older_than_the_targets_retention_are_warned_about(kafka, s3, services, unique, caplog):
    source = ForeignSource(name="aiven_old", layout="aiven", bucket=services.bucket, prefix=f"aiven-old/{unique}/",
                           topic="orders", format="jsonl", fields=["key", "value", "offset", "timestamp", "headers"])
    s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}orders-0-0",
                  Body=aiven_jsonl([(0, b"k0", b"v0", [], TS)]))
    week = 7 * 86_400_000
    target = create_topic(kafka, f"fold-{unique}", config={"retention.ms": str(week)})  # the broker's default
    with caplog.at_level(logging.WARNING, logger=log.name):
        _, reps = reports(restore_foreign(RestoreContext(kafka, s3, log), source, RestoreRequest("orders", target)))
    assert sum(r.restored for r in reps) == 1  # and the broker deletes it soon: what the warning says
    [warning] = [m for m in caplog.messages if "retention.ms" in m]
    assert warning.startswith(f"target topic {target!r} has retention.ms={week}, but a record of window p00000-"), \
        warning
    assert warning.endswith(" being restored is from 2023-11-14T22:13:20+00:00: the broker will delete such records "
                            "soon after they are restored. Set retention.ms=-1 on the target first"), warning


def test_error_tolerance_skip_lists_unreadable_objects_and_restores_the_rest(kafka, s3, services, unique):
    source = ForeignSource(name="aiven_bad", layout="aiven", bucket=services.bucket, prefix=f"aiven-bad/{unique}/",
                           topic="orders", format="jsonl", fields=["key", "value", "offset", "timestamp", "headers"],
                           error_tolerance="skip")
    good = {(0, 0): [(0, b"k0", b"v0", [], TS)], (0, 2): [(2, b"k2", b"v2", [], TS)]}
    for (p, start), recs in good.items():
        s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}orders-{p}-{start}", Body=aiven_jsonl(recs))
    # A record that is not JSON after a good one: the whole object is skipped, none of its records produced.
    bad = f"{source.key_prefix}orders-0-1"
    s3.put_object(Bucket=services.bucket, Key=bad, Body=aiven_jsonl([(1, b"k1", b"v1", [], TS)]) + b"{not json\n")
    target = create_topic(kafka, f"fbad-{unique}", config={"retention.ms": "-1"})
    asset = build_foreign_restore_asset(source)
    res = {k: v for k, v in resources(services, kafka, None).items() if k != "spark"}
    instance = dg.DagsterInstance.ephemeral()

    result = dg.materialize([asset], resources=res, instance=instance, run_config=dg.RunConfig(
        ops={asset.op.name: ForeignRestoreConfig(target_topic=target)}))

    assert [(g.key, g.value) for g in consume_all(kafka, target)[0]] == [(b"k0", b"v0"), (b"k2", b"v2")]
    meta = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["skipped_objects"] == 1 and list(meta["skipped"]) == [bad]
    assert meta["skipped"][bad].startswith("InvalidForeignObject: ") or "JSON" in meta["skipped"][bad], meta
    warnings = [e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.WARNING]
    assert any(f"skipped s3://{services.bucket}/{bad} (error_tolerance: skip)" in w for w in warnings), warnings

    # Without the tolerance the same object fails the run, naming it.
    strict = build_foreign_restore_asset(source.model_copy(update={"error_tolerance": "none"}))
    failed = dg.materialize([strict], resources=res, instance=instance, raise_on_error=False, run_config=dg.RunConfig(
        ops={strict.op.name: ForeignRestoreConfig(target_topic=create_topic(kafka, f"fbad2-{unique}"))}))
    assert not failed.success


def test_a_followed_foreign_source_gets_a_run_for_new_objects_only(s3, services, unique):
    from s3_archive.defs.restore.sensors import FOLLOW_TAG, build_foreign_follow_sensors

    source = ForeignSource(name="aiven_follow", layout="aiven", bucket=services.bucket,
                           prefix=f"aiven-follow/{unique}/", topic="orders", format="jsonl",
                           fields=["key", "value", "offset", "timestamp", "headers"],
                           follow_target_topic=f"ffollow-{unique}")
    (sensor,) = build_foreign_follow_sensors([source])
    s3_resource = resources(services, None, None)["s3"]
    instance = dg.DagsterInstance.ephemeral()

    def tick(cursor):
        return sensor(dg.build_sensor_context(instance=instance, cursor=cursor, resources={"s3": s3_resource}))

    assert not tick(None).run_requests  # nothing under the prefix yet
    s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}orders-0-0",
                  Body=aiven_jsonl([(0, b"k0", b"v0", [], TS)]))
    first = tick(None)
    (request,) = first.run_requests
    assert request.tags[FOLLOW_TAG] == "foreign/aiven_follow"
    assert request.run_config["ops"]["kafka_restore_foreign__aiven_follow"]["config"] == {
        "target_topic": f"ffollow-{unique}"}
    assert first.asset_events[0].metadata["follow_new_objects"].value == 1
    assert not tick(first.cursor).run_requests  # nothing new
    s3.put_object(Bucket=services.bucket, Key=f"{source.key_prefix}orders-0-1",
                  Body=aiven_jsonl([(1, b"k1", b"v1", [], TS)]))
    (again,) = tick(first.cursor).run_requests
    assert again.run_key != request.run_key
