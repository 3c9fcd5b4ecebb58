"""A lost cluster recovered from the archive, against real brokers, moto and Spark: cluster A (its own broker) with
a compacted topic with tombstones, a topic written with transactions (aborted ones too) and a topic of 6
partitions, and three consumer groups; archived and captured; A stopped and its data deleted; an empty cluster B
(`replacement_broker`) planned, then recovered through three kill -9s; then each group's consumer on B reads exactly
what it had not read on A. One story: the refusals run on its topics at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg
import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.recovery.jobs import build_recovery_job
from s3_archive.io.cluster_admin import topic_shapes
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.kafka_broker import KafkaBroker
from s3_archive.model.errors import InvalidRestore
from s3_archive.model.windows import OffsetWindow
from s3_archive.recovery.capture import capture
from s3_archive.recovery.recover import Recovery, RecoveryOptions
from s3_archive.recovery.status import rpo
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import log, materialize, resources
from s3_archive_tests.kafka_helpers import Got, consume_all, create_topic, open_producer

BASE_TS = (int(time.time()) - 3600) * 1000
TOPIC_CONFIGS = {
    # Compacted, but not while the story runs: B (same configs) would compact the restored records too, and what
    # a consumer reads on B would no longer be what it read on A. Its gaps come from aborted transactions; gaps
    # left by the cleaner translate the same way (unit/restore/test_offset_map.py).
    "orders": (2, {"cleanup.policy": "compact", "min.compaction.lag.ms": "86400000",
                   "delete.retention.ms": "86400000"}),
    "payments": (2, {"retention.ms": "-1", "max.message.bytes": "2000000"}),
    "clicks": (6, {"retention.ms": "604800000", "compression.type": "lz4"}),
}


def _produce(kafka: KafkaResource, topic: str, rows: list[tuple[int, bytes | None, bytes | None]], txn: str | None,
             abort_every: int = 0) -> None:
    """Rows (partition, key, value) with headers and explicit timestamps; with `txn`, in transactions of 7 rows,
    every `abort_every`-th aborted."""
    conf = {"enable.idempotence": True, "linger.ms": 5, **({"transactional.id": txn} if txn else {})}
    with open_producer(kafka, **conf) as p:
        if txn:
            p.init_transactions(30)
        for i in range(0, len(rows), 7):
            if txn:
                p.begin_transaction()
            for j, (part, key, value) in enumerate(rows[i:i + 7]):
                p.produce(topic, value=value, key=key, partition=part, timestamp=BASE_TS + i + j,
                          headers=[("n", str(i + j).encode()), ("dup", b"x"), ("dup", None)] if (i + j) % 3 else None)
            if txn:
                p.flush(30)  # an abort purges what is still queued: the aborted records reach the log first
                if abort_every and (i // 7) % abort_every == abort_every - 1:
                    p.abort_transaction(30)
                else:
                    p.commit_transaction(30)
            p.flush(30)


def _lost_cluster(kafka: KafkaResource, unique: str) -> dict[str, str]:
    """The three topics on A (names -> real names), written."""
    names = {t: f"dr-{t}-{unique}" for t in TOPIC_CONFIGS}
    for t, (parts, cfg) in TOPIC_CONFIGS.items():
        create_topic(kafka, names[t], parts, cfg)
    orders = [(i % 2, f"order-{i % 40}".encode(), None if i % 11 == 0 else f"v{i}".encode()) for i in range(400)]
    _produce(kafka, names["orders"], orders[:200], None)
    _produce(kafka, names["orders"], orders[200:], f"dr-orders-{unique}", abort_every=4)  # aborts: gaps
    _produce(kafka, names["payments"], [(i % 2, f"pay-{i}".encode(), os.urandom(50)) for i in range(500)],
             f"dr-payments-{unique}", abort_every=3)
    _produce(kafka, names["clicks"], [(i % 6, None if i % 9 == 0 else f"u{i % 77}".encode(), f"c{i}".encode())
                                      for i in range(900)], None)
    deadline = time.monotonic() + 10  # the coordinator writes the last markers after the calls return
    ends = {}
    while (now := {n: kafka.offsets(n, "latest") for n in names.values()}) != ends and time.monotonic() < deadline:
        ends = now
        time.sleep(0.5)
    return names


def _commits(held: dict[str, dict[int, list[Got]]], names: dict[str, str]) -> dict[str, dict[str, dict[int, int]]]:
    """Mid-partition commits: g1 on every topic (on payments at a gap: an aborted record or a marker), g2 on
    orders and some partitions of clicks, g3 on clicks only (nothing on payments)."""
    def mid(t: str, p: int, frac: float) -> int:
        recs = held[names[t]][p]
        return recs[int(len(recs) * frac)].offset

    def gap(t: str, p: int) -> int:
        offs = [g.offset for g in held[names[t]][p]]
        return next(o + 1 for a, o in enumerate(offs[:-1]) if offs[a + 1] != o + 1 and a > len(offs) // 3)

    return {
        "g1": {names["orders"]: {0: mid("orders", 0, 0.5), 1: mid("orders", 1, 0.3)},
               names["payments"]: {0: gap("payments", 0), 1: gap("payments", 1)},
               names["clicks"]: {p: mid("clicks", p, 0.1 * (p + 1)) for p in range(6)}},
        "g2": {names["orders"]: {0: mid("orders", 0, 0.9)}, names["clicks"]: {1: mid("clicks", 1, 0.5),
                                                                             4: mid("clicks", 4, 0.2)}},
        "g3": {names["clicks"]: {p: mid("clicks", p, 0.7) for p in range(6)}},
    }


def expected(held: dict[int, list[Got]], committed: dict[int, int] | None) -> dict[int, list[tuple]]:
    """What a group's next consumer reads: the records at or after its commit (all where it has none)."""
    committed = committed or {}
    return {p: [g.body for g in recs if g.offset >= committed.get(p, 0)] for p, recs in held.items()}


@dataclass
class Story:
    archives: list[ArchiveConfig]
    names: dict[str, str]
    held: dict[str, dict[int, list[Got]]]  # what A held: topic -> partition -> records
    commits: dict[str, dict[str, dict[int, int]]]
    shapes: dict  # A's topic shapes
    target: KafkaResource
    res: dict
    groups: dict[str, str]  # "g1" -> the real group name


_KILLED = """
import json, logging, os, signal, sys
import boto3
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.recovery.recover import Recovery, RecoveryHooks, RecoveryOptions

a = json.loads(sys.argv[1])
s3 = boto3.client("s3", endpoint_url=a["endpoint"], **a["aws"])

def fault(step):
    if step == a["kill_at"]:
        os.kill(os.getpid(), signal.SIGKILL)

Recovery([ArchiveConfig.model_validate(c) for c in a["archives"]], KafkaResource(bootstrap_servers=a["bootstrap"]),
         s3, logging.getLogger(), RecoveryOptions(apply=True), RecoveryHooks(fault)).run()
raise SystemExit("the run was not killed")
"""


def _killed_run(story: Story, services, kill_at: str) -> None:
    aws = {"region_name": TEST_AWS["AWS_REGION"], "aws_access_key_id": TEST_AWS["AWS_ACCESS_KEY_ID"],
           "aws_secret_access_key": TEST_AWS["AWS_SECRET_ACCESS_KEY"]}
    args = {"endpoint": services.s3_endpoint_url, "aws": aws, "bootstrap": story.target.bootstrap_servers,
            "archives": [c.model_dump(mode="json", exclude_unset=True) for c in story.archives], "kill_at": kill_at}
    proc = subprocess.run([sys.executable, "-c", _KILLED, json.dumps(args)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == -9, f"killed at {kill_at}? rc {proc.returncode}: {proc.stderr[-3000:]}"


def _job(story: Story, **config) -> dg.ExecuteInJobResult:
    job = build_recovery_job(story.archives)
    return job.execute_in_process(run_config={"ops": {"recover_cluster": {"config": config}}},
                                  resources={"kafka": story.target, "s3": story.res["s3"]}, raise_on_error=False)


def _output(result: dg.ExecuteInJobResult) -> dict:
    assert result.success, [str(e.event_specific_data.error) for e in result.all_events
                            if e.event_type_value == "STEP_FAILURE"]
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in event.event_specific_data.metadata.items()}


@pytest.fixture(scope="module")
def story(tmp_path_factory, services, spark_resource, replacement_broker: KafkaBroker) -> Iterator[Story]:
    t0 = time.monotonic()
    unique = uuid.uuid4().hex[:8]
    lost = KafkaBroker(tmp_path_factory.mktemp("lost-cluster") / "kafka")
    lost.start()
    a = KafkaResource(bootstrap_servers=lost.bootstrap_servers)
    try:
        names = _lost_cluster(a, unique)
        held = {n: consume_all(a, n) for n in names.values()}
        groups = {g: f"{g}-{unique}" for g in ("g1", "g2", "g3")}
        commits = _commits(held, names)
        for g, topics in commits.items():
            for topic, offsets in topics.items():
                a.set_group_offsets(groups[g], topic, offsets)
        archives = [ArchiveConfig(name="dr", topics=sorted(names.values()), bucket=services.bucket,
                                  prefix=f"dr/{unique}/", format="parquet")]
        res = resources(services, a, spark_resource)
        for topic in names.values():
            ends = a.offsets(topic, "latest")
            materialize(archives[0], topic, [OffsetWindow(p, 0, e) for p, e in sorted(ends.items()) if e], res)
        rep = capture(a, res["s3"].get_client(), archives[0], int(time.time() * 1000), groups_due=True)
        assert sorted(rep.topics_written) == sorted(names.values())
        assert set(groups.values()) <= set(rep.groups)
        assert rep.acls == "written"  # the bindings on these topics and groups (none here), readable here
        again = capture(a, res["s3"].get_client(), archives[0], int(time.time() * 1000), groups_due=False)
        assert (again.topics_written, again.snapshot_key, again.acls) == ([], None, "unchanged")  # written on change
        shapes = topic_shapes(a, sorted(names.values()))
    finally:
        a.close()
        lost.stop()
    shutil.rmtree(lost.data_dir)  # the cluster is gone, data and all
    log.info(f"lost cluster made, archived and captured in {time.monotonic() - t0:.1f}s")
    target = KafkaResource(bootstrap_servers=replacement_broker.bootstrap_servers)
    try:
        yield Story(archives, names, held, {groups[g]: c for g, c in commits.items()}, shapes, target,
                    {**res, "kafka": target}, groups)
    finally:
        target.close()


def test_a_lost_cluster_is_recovered_exactly_through_kills(story: Story, services) -> None:
    t0 = time.monotonic()
    names = sorted(story.names.values())
    # the plan (the job's default mode) writes nothing
    planned = _output(_job(story))
    assert planned["mode"] == "plan" and not planned["changed"]
    for n in names:
        assert f"topic {n!r}: create with {story.shapes[n].partitions} partitions" in planned["plan"]
    assert not set(names) & set(story.target.topics())

    # killed after the topics are created, after half the windows, after the first group's offsets
    n_windows = sum(len(parts) for parts in story.held.values())
    for kill_at in ("topics_created", f"window:{n_windows // 2}", "group:1"):
        _killed_run(story, services, kill_at)
    done = _output(_job(story, mode="recover"))
    # the third killed run had restored every window and set the first group's offsets: what is left is the others'
    assert done["topics_created"] == 0 and done["records_restored"] == 0 and done["groups_set"] == 2

    # topics as they were: partition counts and every non-default config
    assert topic_shapes(story.target, names) == story.shapes
    # every record once, in order, with its key, value, headers and timestamp
    for n in names:
        got = consume_all(story.target, n)
        assert {p: [g.body for g in recs] for p, recs in got.items()} == \
            {p: [g.body for g in recs] for p, recs in story.held[n].items()}, n
    # each group's next consumer on B reads exactly what it had not read on A: 0 duplicated, 0 missing
    for group in story.groups.values():
        for n in names:
            assert {p: [g.body for g in recs] for p, recs in consume_all(story.target, n, group).items()} == \
                expected(story.held[n], story.commits[group].get(n)), (group, n)

    # a second run changes nothing, and says so
    again = _output(_job(story, mode="recover"))
    assert not again["changed"] and "nothing changed" in again["plan"]

    # `dr status`: each topic's and group's recovery point now
    lines = {(r.kind, r.name): r for r in rpo(story.res["s3"].get_client(), story.archives[0],
                                               int(time.time() * 1000))}
    for n in names:
        assert lines[("topic", n)].age_seconds is not None and "config captured" in lines[("topic", n)].detail
    for group in story.groups.values():
        assert 0 <= lines[("group", group)].age_seconds < 600
    log.info(f"recovery story (plan, 3 kills, recover, verify, again): {time.monotonic() - t0:.1f}s")


def test_refusals_name_the_group_with_members_and_the_conflicting_topic(story: Story) -> None:
    g1 = story.groups["g1"]
    orders = story.names["orders"]
    member = Consumer(story.target.client_config(**{"group.id": g1, "enable.auto.commit": False}))
    try:
        member.subscribe([story.names["clicks"]])
        deadline = time.monotonic() + 30
        while story.target.group_members(g1) == 0:
            assert time.monotonic() < deadline, "the consumer never joined"
            member.poll(0.2)
        with pytest.raises(InvalidRestore, match=f"group '{g1}' has members on the target"):
            Recovery(story.archives, story.target, story.res["s3"].get_client(), log,
                     RecoveryOptions(apply=True)).run()
    finally:
        member.close()

    res = ConfigResource(ResourceType.TOPIC, orders, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    story.target.admin().incremental_alter_configs([res])[res].result(timeout=30)
    failed = _job(story, mode="recover")
    assert not failed.success
    text = "\n".join(str(e.event_specific_data.error.message) for e in failed.all_events
                     if e.event_type_value == "STEP_FAILURE")
    assert f"topic {orders!r}: REFUSED" in text and "cleanup.policy='delete' (captured 'compact')" in text
    assert "Nothing was changed" in text
