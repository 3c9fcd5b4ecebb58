"""The suite's xdist groups and turns (s3_archive_tests/workers.py): the users of a server run on one worker, and a
test marked `alone` runs with no other beside it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from s3_archive_tests import workers

TESTS = Path("/suite")


@dataclass
class Item:
    nodeid: str
    fixturenames: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return TESTS / self.nodeid.split("::")[0]


def test_each_module_is_a_group_and_the_modules_sharing_a_server_are_one_named_after_it():
    items = [Item("unit/test_a.py::t"), Item("integration/x/test_b.py::t1", ["kafka"]),
             Item("integration/x/test_b.py::t2"), Item("e2e/test_c.py::t", ["postgres"]),
             Item("integration/x/test_d.py::t", ["postgres", "services"]),
             Item("integration/x/test_e.py::t1", ["secure_services"]), Item("integration/x/test_e.py::t2"),
             Item("integration/y/test_f.py::t", ["spark_cluster", "secure_services"]),
             Item("integration/y/test_g.py::t", ["spark_cluster"]), Item("integration/y/test_h.py::t", ["spark"])]
    got = workers.groups(items, TESTS)
    assert "unit/test_a.py::t" not in got  # unit tests are spread one by one
    assert got["integration/x/test_b.py::t1"] == got["integration/x/test_b.py::t2"] == "integration/x/test_b.py"
    assert got["e2e/test_c.py::t"] == got["integration/x/test_d.py::t"] == "postgres"
    # secure_services and spark_cluster are used together once: all of their users are one group
    merged = {got[i.nodeid] for i in items[5:9]}
    assert len(merged) == 1 and merged <= {"secure_services", "spark_cluster"}
    assert got["integration/y/test_h.py::t"] == "integration/y/test_h.py"  # a SparkSession is each worker's own


def _hold(shared_dir: Path, alone: bool, events: list[str], name: str, seconds: float) -> threading.Thread:
    def run() -> None:
        with workers.turn(shared_dir, alone):
            events.append(f"{name} in")
            time.sleep(seconds)
            events.append(f"{name} out")

    t = threading.Thread(target=run)
    t.start()
    return t


def test_shared_turns_overlap_and_an_alone_one_overlaps_none(tmp_path):
    events: list[str] = []
    a = _hold(tmp_path, False, events, "a", 0.6)
    time.sleep(0.1)
    b = _hold(tmp_path, False, events, "b", 0.2)  # beside a
    time.sleep(0.1)
    solo = _hold(tmp_path, True, events, "solo", 0.4)  # waits for a and b
    time.sleep(0.1)
    c = _hold(tmp_path, False, events, "c", 0.1)  # comes after solo, though a still runs when it asks
    for t in (a, b, solo, c):
        t.join(10)
    assert events[:2] == ["a in", "b in"]
    at = events.index("solo in")
    assert {"a out", "b out"} <= set(events[:at]) and events[at + 1] == "solo out"
    assert events[at + 2:] == ["c in", "c out"]
