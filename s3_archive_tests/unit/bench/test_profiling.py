"""The CPU accounting's pure helpers: /proc stat lines and CPU deltas (bench/tools/procstat.py), and the JFR sample
split (bench/tools/jfr_top.py)."""

from __future__ import annotations

import pytest

from bench.tools import jfr_top
from bench.tools.procstat import (
    TICK,
    Stat,
    cpu_delta,
    descendants,
    machine_cpu,
    parse_stat,
    thread_deltas,
    thread_group,
)


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0,
          start: int = 100) -> str:
    fields = ["S", ppid, 1, 1, 0, -1, 0, 0, 0, 0, 0, utime, stime, cutime, cstime, 20, 0, 1, 0, start, 0, 0]
    return f"{pid} ({comm}) " + " ".join(str(f) for f in fields)


def test_parse_stat_reads_times_and_a_comm_with_spaces_and_parentheses():
    s = parse_stat(_stat(42, "Executor (task) l", 7, 300, 100, 50, 50, start=1234))
    assert (s.pid, s.ppid, s.comm, s.start) == (42, 7, "Executor (task) l", 1234)
    assert s.own == pytest.approx(400 / TICK) and s.reaped == pytest.approx(100 / TICK)


def test_machine_cpu_counts_idle_and_iowait_as_not_busy():
    busy, total = machine_cpu("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert busy == pytest.approx(150 / TICK) and total == pytest.approx(1000 / TICK)


def test_a_subtree_keeps_the_time_of_a_worker_that_ended():
    # the daemon (2) forks worker 3; worker 3 ends and is reaped by the daemon, worker 4 starts
    before = {1: Stat(1, 0, "java", 10.0, 0, 1), 2: Stat(2, 1, "python", 1.0, 0.0, 2),
              3: Stat(3, 2, "python", 5.0, 0.0, 3)}
    after = {1: Stat(1, 0, "java", 12.0, 0, 1), 2: Stat(2, 1, "python", 1.5, 7.0, 2),
             4: Stat(4, 2, "python", 2.0, 0.0, 4)}
    workers = cpu_delta(before, after, lambda P: descendants(P, 1) - {1})
    assert workers == pytest.approx(0.5 + 2.0 + (7.0 - 5.0))
    assert cpu_delta(before, after, lambda P: {1} & P.keys()) == pytest.approx(2.0)
    assert descendants(after, 2) == {2, 4}


def test_thread_deltas_count_a_new_thread_whole_and_group_pools():
    before = {10: Stat(10, 1, "GC Thread#0", 1.0, 0, 5)}
    after = {10: Stat(10, 1, "GC Thread#0", 1.5, 0, 5), 11: Stat(11, 1, "Executor task l", 3.0, 0, 9),
             20: Stat(20, 2, "other", 9.0, 0, 9)}
    assert thread_deltas(before, after, 1) == {10: ("GC Thread#0", pytest.approx(0.5)), 11: ("Executor task l", 3.0)}
    assert thread_group("GC Thread#1") == "GC Thread" and thread_group("C2 CompilerThre") == "C2 CompilerThre"


JFR_TEXT = """
jdk.ExecutionSample {
  startTime = 10:00:00.001
  sampledThread = "Executor task launch worker for task 1.0 in stage 3.0 (TID 7)" (javaThreadId = 80)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.spark.sql.catalyst.expressions.codegen.UnsafeWriter.write(byte[]) line: 10
    org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificUnsafeProjection.apply(Object) line: 1
    org.apache.spark.sql.kafka010.KafkaRecordToRowConverter.$anonfun$toInternalRowWithHeaders$1(Object) line: 5
    org.apache.spark.sql.execution.python.PythonArrowInput.writeNextBatch(DataOutputStream) line: 1
  ]
}

jdk.ExecutionSample {
  startTime = 10:00:00.011
  sampledThread = "Executor task launch worker for task 2.0 in stage 3.0 (TID 8)" (javaThreadId = 81)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.spark.unsafe.types.UTF8String.concatWs(UTF8String, UTF8String[]) line: 3
    org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage1.processNext() line: 1
    org.apache.spark.sql.execution.BufferedRowIterator.hasNext() line: 43
    ...
  ]
}

jdk.ExecutionSample {
  startTime = 10:00:00.021
  sampledThread = "Executor task launch worker for task 2.0 in stage 3.0 (TID 8)" (javaThreadId = 81)
  state = "STATE_RUNNABLE"
  stackTrace = [
    sun.nio.ch.SocketDispatcher.write0(FileDescriptor, long, int)
    java.io.BufferedOutputStream.flush() line: 1
    org.apache.arrow.vector.ipc.WriteChannel.write(ByteBuffer) line: 1
    org.apache.spark.sql.execution.python.PythonArrowInput.writeNextBatch(DataOutputStream) line: 1
  ]
}

jdk.ExecutionSample {
  startTime = 10:00:00.031
  sampledThread = "Executor task launch worker for task 2.0 in stage 3.0 (TID 8)" (javaThreadId = 81)
  state = "STATE_RUNNABLE"
  stackTrace = [
    sun.nio.ch.SocketChannelImpl.read(ByteBuffer) line: 1
    org.apache.kafka.common.network.NetworkReceive.readFrom(ScatteringByteChannel) line: 1
  ]
}

jdk.ExecutionSample {
  startTime = 10:00:00.041
  sampledThread = "dispatcher-event-loop-1" (javaThreadId = 30)
  state = "STATE_RUNNABLE"
  stackTrace = [
    java.util.HashMap.get(Object) line: 1
    org.apache.spark.rpc.netty.Dispatcher.post(Object) line: 1
  ]
}
"""


def test_jfr_samples_are_parsed_and_split_by_stage():
    samples = jfr_top.parse(JFR_TEXT)
    assert len(samples) == 5 and samples[0].frames[-1].endswith("PythonArrowInput.writeNextBatch")
    assert jfr_top.thread_group(samples[0].thread) == "Executor task launch worker"
    assert [jfr_top.stage(s.frames) for s in samples[:4]] == [
        jfr_top.KAFKA[0], jfr_top.PROJECTIONS, jfr_top.SOCKET, jfr_top.KAFKA[1]]
    p = jfr_top.profile(samples)
    assert p.samples == 5 and p.task_samples == 4
    assert p.threads["dispatcher-event-loop"] == 1
    assert p.top_self["org.apache.spark.unsafe.types.UTF8String.concatWs"] == 1
    assert p.markers["Kafka record -> UnsafeRow"] == 1 and p.markers["socket write"] == 2
    assert "Spark task threads, 4 samples" in p.render()
    assert jfr_top.self_frame(samples[4].frames) == "org.apache.spark.rpc.netty.Dispatcher.post"
