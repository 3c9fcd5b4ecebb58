"""Broker outages under a restore (reliability tier), on a broker of their own (`outage_broker`): restarted on the
same ports ~10 s after the first commit, or frozen (SIGSTOP: the transaction coordinator gone while its
connections stay open, where librdkafka can ignore its timeouts). A restart within `broker_outage_seconds` is
ridden out by the run itself (a new producer resumes from the ledger); a coordinator frozen past the bound fails the
run within it, naming the coordinator, and the re-run completes. Every record is in the target exactly once and the
ledger lists every offset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import pytest

import s3_archive.restore.producer as rk
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.stack import LOCAL_AWS
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.producer import LedgerStore
from s3_archive.restore.request import (
    PROVENANCE_OFFSET,
    PROVENANCE_PARTITION,
    RestoreContext,
    RestoreHooks,
    RestoreRequest,
)
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.integration.archive_helpers import archive_config, log, materialize, resources
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce

PARTITIONS, WINDOW, WINDOWS_PER_PARTITION = 2, 600, 2
DOWN_S = 10.0  # how long the broker stays down
# Tight deadlines for the test (default: 30 s timeout + 15 s grace): a producer call may take TIMEOUT_S, our
# watchdog gives up GRACE_S later. A run that does not ride the outage out fails within a few such deadlines.
TIMEOUT_S, GRACE_S = 8.0, 4.0
BOUND_S = 60.0


@dataclass(frozen=True)
class Archived:
    kafka: KafkaResource
    topic: str
    cfg: object
    windows: list[OffsetWindow]
    produced: dict[tuple[int, int], bytes]  # (partition, offset) -> value


@pytest.fixture(scope="module")
def archived(outage_kafka, services, spark_resource) -> Archived:
    kafka = outage_kafka
    unique = uuid.uuid4().hex[:8]
    topic = create_topic(kafka, f"outage-src-{unique}", partitions=PARTITIONS)
    n = PARTITIONS * WINDOW * WINDOWS_PER_PARTITION
    recs = produce(kafka, topic, [(i % PARTITIONS, f"k{i}".encode(), os.urandom(64), [("i", str(i).encode())])
                                  for i in range(n)])
    cfg = archive_config(services.bucket, topic, f"outage/{unique}/", format="parquet")
    windows = [OffsetWindow(p, s, s + WINDOW) for p in range(PARTITIONS)
               for s in range(0, WINDOW * WINDOWS_PER_PARTITION, WINDOW)]
    materialize(cfg, topic, windows, resources(services, kafka, spark_resource))
    return Archived(kafka, topic, cfg, windows, {(r.partition, r.offset): r.value for r in recs})


def restore(a: Archived, s3, target: str, fault=None, producers: int = 1, client: str = "python") -> list:
    request = RestoreRequest(a.topic, target, provenance_headers=True, transaction_records=300, producers=producers,
                             producer=client)
    return list(restore_windows(RestoreContext(a.kafka, s3, log), ArchiveSource(a.cfg.bucket, a.cfg.prefix), request,
                                a.windows, **({"hooks": RestoreHooks(fault)} if fault else {})))


def assert_exactly_once(a: Archived, target: str) -> None:
    got = [g for recs in consume_all(a.kafka, target).values() for g in recs]
    sources = Counter((int(g.header(PROVENANCE_PARTITION)), int(g.header(PROVENANCE_OFFSET))) for g in got)
    assert [k for k, n in sources.items() if n > 1] == []  # 0 duplicated
    assert set(sources) == set(a.produced)  # 0 lost
    assert all(a.produced[(int(g.header(PROVENANCE_PARTITION)), int(g.header(PROVENANCE_OFFSET)))] == g.value
               for g in got)
    for tp, recs in consume_all(a.kafka, target).items():  # mapping same: source partition p into p, in order
        offsets = [int(g.header(PROVENANCE_OFFSET)) for g in recs]
        assert {int(g.header(PROVENANCE_PARTITION)) for g in recs} <= {tp}
        assert offsets == sorted(offsets), f"target partition {tp} out of source order"
    store = LedgerStore(a.kafka, RestoreRequest(a.topic, target), PARTITIONS)
    try:
        ledger = store.read()
    finally:
        store.close()
    assert {p: rs.ranges() for p, rs in ledger.items()} == \
        {p: [[0, WINDOW * WINDOWS_PER_PARTITION]] for p in range(PARTITIONS)}


@pytest.mark.alone  # the watchdog's tight deadlines (TIMEOUT_S, GRACE_S) and BOUND_S
@pytest.mark.parametrize("producers,client", [(1, "python"), (2, "python"), (1, "native")])
def test_a_broker_restarted_mid_restore_is_ridden_out_exactly_once(outage_broker, archived, s3, unique, monkeypatch,
                                                                  caplog, producers, client):
    """With 2 producers both groups are in flight (each its source partition, transactions of 300 records) when
    the first commit of either stops the broker: each rides it out on its own."""
    monkeypatch.setattr(rk, "TRANSACTION_CALL_TIMEOUT_S", TIMEOUT_S)
    monkeypatch.setattr(rk, "WATCHDOG_GRACE_S", GRACE_S)
    target = create_topic(archived.kafka, f"outage-rst{producers}-{client}-{unique}", partitions=PARTITIONS)
    stopped, back = threading.Event(), threading.Event()  # the broker was stopped (once), and is back
    produced_by: Counter = Counter()  # records handed to the producer, per group's thread
    once = threading.Lock()

    def fault(step: str) -> None:
        if step.startswith("produced:"):
            produced_by[threading.current_thread().name] += 1
        # the first commit once every group is in flight: records of the next transactions follow while the
        # broker is down
        elif len(produced_by) == producers:
            with once:  # the groups' threads commit side by side: one of them stops the broker, once
                if stopped.is_set():
                    return
                stopped.set()
            outage_broker.stop()
            threading.Thread(target=lambda: (time.sleep(DOWN_S), outage_broker.start(), back.set()),
                             daemon=True).start()

    t0 = time.monotonic()
    with caplog.at_level("INFO", logger=log.name):
        reports = restore(archived, s3, target, fault, producers, client)
    elapsed = time.monotonic() - t0
    print(f"\nrestore ({producers} producers) with a {DOWN_S:.0f}s broker restart: rode it out in {elapsed:.1f}s "
          f"({sum(r.restored for r in reports)} records)")
    assert stopped.is_set(), "the broker was never stopped"
    assert back.wait(30), "the broker did not come back"
    assert "re-initialising the producer" in caplog.text and "answers again" in caplog.text
    assert f"partitions, mapping same, {producers} producer(s))" in caplog.text  # both groups ran side by side
    # One report per window, none lost to the outage; nothing needed a re-run.
    assert sorted(r.window for r in reports) == sorted(archived.windows)
    assert elapsed < DOWN_S + BOUND_S
    assert_exactly_once(archived, target)


_FROZEN_RESTORE = """
import json, logging, os, signal, sys
import boto3
import s3_archive.restore.producer as rk
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreHooks, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource

a = json.loads(sys.argv[1])
rk.TRANSACTION_CALL_TIMEOUT_S, rk.WATCHDOG_GRACE_S = a["timeout"], a["grace"]
s3 = boto3.client("s3", endpoint_url=a["endpoint"], **a["aws"])
request = RestoreRequest(a["source"], a["target"], provenance_headers=True, transaction_records=a["txn"],
                         broker_outage_seconds=a["outage"])

def fault(step):
    if step == a["freeze_at"]:  # inside the run's second transaction: its first record is handed to the producer
        os.kill(a["broker_pid"], signal.SIGSTOP)  # the coordinator is gone; its connections stay open
        print("frozen at", step, file=sys.stderr, flush=True)

kafka = KafkaResource(bootstrap_servers=a["bootstrap"], timeout_s=a["client_timeout"])
for _ in restore_windows(RestoreContext(kafka, s3, logging.getLogger()), ArchiveSource(a["bucket"], a["prefix"]),
                         request, [OffsetWindow.parse(k) for k in a["windows"]], hooks=RestoreHooks(fault)):
    pass
"""


@pytest.mark.alone  # the watchdog's tight deadlines (TIMEOUT_S, GRACE_S) and BOUND_S
def test_a_frozen_coordinator_fails_the_run_within_the_deadline_and_the_process_exits(outage_broker, archived, s3,
                                                                                       services, unique):
    """The watchdog and the outage bound, end to end: the run's process (as a Dagster run worker runs the restore)
    fails within its deadline plus `broker_outage_seconds` while the broker stays frozen, with the error that
    stopped it, and exits, though calls of the client may still be blocked."""
    target = create_topic(archived.kafka, f"outage-frz-{unique}", partitions=PARTITIONS)
    archived.kafka.offsets(target, "latest")  # the new topic's leaders are known before the run starts
    txn = 300
    # The client's own timeout is the fixture's (5 s): with 1 s, a setup query of the run (ListOffsets) could
    # time out under load before the freeze, which is not what this test is about. Its transactional calls get
    # max(3, 5) = 5 s, and our watchdog gives up 3 s later.
    client_timeout, timeout, grace, outage = 5.0, 3.0, 3.0, 10.0
    deadline = max(timeout, client_timeout) + grace
    aws = {"region_name": LOCAL_AWS["AWS_REGION"], "aws_access_key_id": LOCAL_AWS["AWS_ACCESS_KEY_ID"],
           "aws_secret_access_key": LOCAL_AWS["AWS_SECRET_ACCESS_KEY"]}
    args = {"endpoint": services.s3_endpoint_url, "aws": aws, "bootstrap": archived.kafka.bootstrap_servers,
            "bucket": archived.cfg.bucket, "prefix": archived.cfg.prefix, "source": archived.topic,
            "target": target, "windows": [w.key for w in archived.windows], "broker_pid": outage_broker.pid,
            "timeout": timeout, "grace": grace, "client_timeout": client_timeout, "txn": txn, "outage": outage,
            "freeze_at": f"produced:{txn + 1}"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _FROZEN_RESTORE, json.dumps(args)], capture_output=True,
                              text=True, timeout=90, env={**os.environ, "PYTHONPATH": os.getcwd()})
    finally:
        os.kill(outage_broker.pid, signal.SIGCONT)
    elapsed = time.monotonic() - t0
    lines = proc.stderr.strip().splitlines()
    err = next((line for line in reversed(lines) if line.startswith("s3_archive.")), lines[-1] if lines else "")
    print(f"\nfrozen coordinator: the run's process exited with {proc.returncode} after {elapsed:.1f}s: {err}")
    assert f"frozen at produced:{txn + 1}" in proc.stderr, proc.stderr[-3000:]  # the freeze came first
    assert proc.returncode == 1, proc.stderr[-3000:]
    # Our watchdog ended the blocking transactional call (not the client's own timeout, not a setup query), and
    # its error names the call, the transactional.id and the broker.
    assert err.startswith("s3_archive.model.errors.RestoreFailed: "), err
    assert f"did not return within {deadline:.0f}s" in err, err
    assert any(f"{call} for transactional.id" in err for call in ("send_offsets_to_transaction",
                                                                  "commit_transaction")), err
    assert RestoreRequest(archived.topic, target).ledger_id in err and archived.kafka.bootstrap_servers in err, err
    assert "transaction coordinator" in err, err
    assert f"stayed unreachable for {outage:g}s more (broker_outage_seconds)" in err, err
    assert "re-initialising the producer" in proc.stderr, proc.stderr[-3000:]
    assert elapsed < deadline + outage + deadline + 30

    restore(archived, s3, target)  # the broker is back: the re-run completes
    assert_exactly_once(archived, target)


_KILLED_GROUPS = """
import json, logging, os, signal, sys
import boto3
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreHooks, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource

a = json.loads(sys.argv[1])
s3 = boto3.client("s3", endpoint_url=a["endpoint"], **a["aws"])
request = RestoreRequest(a["source"], a["target"], provenance_headers=True, transaction_records=a["txn"],
                         producers=2)
import collections, threading
produced_by = collections.Counter()

def fault(step):
    if step.startswith("produced:"):
        produced_by[threading.current_thread().name] += 1
        # each group has committed a transaction and is inside its next one
        if len(produced_by) == 2 and min(produced_by.values()) > a["txn"] + 50:
            print("killed at", dict(produced_by), file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all: both groups' transactions stay open

for _ in restore_windows(RestoreContext(KafkaResource(bootstrap_servers=a["bootstrap"]), s3, logging.getLogger()),
                         ArchiveSource(a["bucket"], a["prefix"]), request, [OffsetWindow.parse(k) for k in a["windows"]],
                         hooks=RestoreHooks(fault)):
    pass
"""


@pytest.mark.parametrize("rerun_producers", [2, 1])
def test_a_run_of_two_producers_killed_mid_transaction_then_rerun_is_exactly_once(outage_broker, archived, s3,
                                                                                  services, unique, rerun_producers):
    """Two groups in flight (transactions of 300 records, each group its source partition) when the process is
    SIGKILLed: both leave a transaction open. The re-run initialises every transactional id of the restore
    (whatever its own `producers`), which aborts both, then resumes from the ledger: every record once, in order
    per partition."""
    target = create_topic(archived.kafka, f"outage-kill{rerun_producers}-{unique}", partitions=PARTITIONS)
    aws = {"region_name": LOCAL_AWS["AWS_REGION"], "aws_access_key_id": LOCAL_AWS["AWS_ACCESS_KEY_ID"],
           "aws_secret_access_key": LOCAL_AWS["AWS_SECRET_ACCESS_KEY"]}
    txn = 300
    args = {"endpoint": services.s3_endpoint_url, "aws": aws, "bootstrap": archived.kafka.bootstrap_servers,
            "bucket": archived.cfg.bucket, "prefix": archived.cfg.prefix, "source": archived.topic,
            "target": target, "windows": [w.key for w in archived.windows], "txn": txn}
    proc = subprocess.run([sys.executable, "-c", _KILLED_GROUPS, json.dumps(args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == -9, proc.stderr[-3000:]
    killed = proc.stderr[proc.stderr.index("killed at"):]  # both groups inside a transaction, in either order
    assert "'s3-archive-restore-group-0'" in killed and "'s3-archive-restore-group-1'" in killed, proc.stderr[-3000:]

    store = LedgerStore(archived.kafka, RestoreRequest(archived.topic, target), PARTITIONS)
    t0 = time.monotonic()
    reports = restore(archived, s3, target, producers=rerun_producers)
    elapsed = time.monotonic() - t0
    try:
        ledger = store.read()
    finally:
        store.close()
    skipped, restored = sum(r.skipped for r in reports), sum(r.restored for r in reports)
    by_partition = Counter()
    for r in reports:
        by_partition[r.window.partition] += r.skipped
    print(f"\nre-run ({rerun_producers} producers) after a kill of 2 producers: {skipped} records skipped "
          f"(committed before the kill), {restored} restored in {elapsed:.1f}s")
    # Both groups had committed before the kill (the ledger lists whole transactions of each source partition), and
    # their open transactions were aborted: the re-run restored exactly the rest.
    assert all(by_partition[p] >= txn and by_partition[p] % txn == 0 for p in range(PARTITIONS)), by_partition
    assert skipped + restored == len(archived.produced)
    assert {p: rs.ranges() for p, rs in ledger.items()} == \
        {p: [[0, WINDOW * WINDOWS_PER_PARTITION]] for p in range(PARTITIONS)}
    assert_exactly_once(archived, target)
