"""The suite on pytest-xdist workers (`make test`: `pytest -n 2 --dist loadgroup`), with one broker and one moto
server for the whole run.

- **The shared stack.** The controller process starts the broker and the moto server (with the test bucket) before
  the workers start, hands their addresses to each worker (`workerinput`), and stops them by PID after the last
  worker has finished. They are tied to the controller (`processes.spawn`): a killed run leaves none behind. A
  worker that started them could not stop them last, as that tie would stop them with it.
- **One per worker.** A SparkSession lives in its driver's JVM, a child of the worker process that made it: it
  cannot cross processes, so each worker has its own (`local[2]`), as it has its own fault proxies and versitygw.
- **The other servers** (Postgres, the Schema Registries, the SASL_SSL stack, the outage and replacement brokers,
  Spark Connect, the standalone cluster) are started by the one worker that runs their tests: every test module
  of `integration/` and `e2e/` is one group (its module-scoped servers and its tests' order stay in one
  process), and the modules that share such a server are one group (`groups`). Unit tests are spread one by one.
  The workers write the groups where the controller's scheduler reads them (`scheduler`).
- **Tests that need the whole machine** (deadlines on a broker's outage, on a client's timeout) are marked
  `alone`: each runs with no test of the other worker beside it (`turn`), its setup and teardown included;
  what a module keeps running between its tests (an e2e module's Dagster daemon) is not stopped meanwhile.

Without `-n`, none of this applies: the session fixtures start the stack in the one process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3_archive.local.stack import temporary_stack

KEY = "s3_archive_stack"  # workerinput: the shared stack's addresses
_STACK = pytest.StashKey[dict]()
# Session fixtures for servers a few modules start on demand: each one's users run on one worker.
SERVERS = ("postgres", "registry_server", "target_registry_server", "secure_services", "outage_broker",
           "replacement_broker", "spark_connect", "spark_cluster")
TIER_GROUPED = ("integration", "e2e")
GROUPS = "groups.json"


def is_controller(config: pytest.Config) -> bool:
    """The controller of an xdist run (it runs no test; its workers do)."""
    return config.pluginmanager.has_plugin("dsession")


def start_shared_stack(session: pytest.Session, bucket: str) -> None:
    """The run's broker and moto server, started by the controller and stopped when it ends; their directory is
    kept (and named) only if a test failed, for the servers' logs."""
    config = session.config
    dist = config.getoption("dist")
    if dist != "loadgroup":
        raise pytest.UsageError(f"--dist {dist}: this suite runs on workers only with --dist loadgroup (its test "
                                "modules and the users of each server are xdist groups)")
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    stack = contextlib.ExitStack()
    broker, moto, root = stack.enter_context(temporary_stack("s3-archive-tests-", bucket, broker_heap="512m"))

    def stop() -> None:
        stack.close()
        if session.testsfailed:
            print(f"\nthe shared broker's and moto server's logs: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    config.add_cleanup(stop)
    config.stash[_STACK] = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                            "dir": str(root)}


def hand_to_worker(node) -> None:
    """`pytest_configure_node`: the worker gets the shared stack's addresses."""
    node.workerinput[KEY] = node.config.stash[_STACK]


def shared_stack(config: pytest.Config) -> dict | None:
    """On a worker, the shared stack's addresses and directory; None without xdist."""
    return getattr(config, "workerinput", {}).get(KEY)


def write_groups(shared_dir: Path, grouped: dict[str, str]) -> None:
    """A worker's groups, for the controller's scheduler (both workers write the same, each atomically)."""
    tmp = shared_dir / f"groups.{os.getpid()}.json"
    tmp.write_text(json.dumps(grouped))
    tmp.replace(shared_dir / GROUPS)


def scheduler(config: pytest.Config, log):
    """`pytest_xdist_make_scheduler` for `--dist loadgroup`: xdist's scheduling by scope, a scope being a group of
    `groups` (a unit test is a scope of its own). Not xdist's own loadgroup: it names a test's group by appending
    it to the nodeid (`item._nodeid`), which pytest 9 no longer reads, so its groups would be lost silently."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared_dir = Path(config.stash[_STACK]["dir"])

    class GroupScheduling(LoadScopeScheduling):
        grouped: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.grouped is None:  # written by the workers as they collected, before the first call
                self.grouped = json.loads((shared_dir / GROUPS).read_text())
            return self.grouped.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def groups(items: list[pytest.Item], tests: Path) -> dict[str, str]:
    """nodeid -> xdist group of every integration and e2e test: its module's, the modules sharing a server of
    `SERVERS` merged into one group named after it."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    modules = {}
    for item in items:
        path = item.path.relative_to(tests)
        if path.parts[0] not in TIER_GROUPED:
            continue
        modules[item.nodeid] = module = "/".join(path.parts)
        for server in SERVERS:
            if server in item.fixturenames:
                a, b = find(module), find(server)
                if a != b:
                    parent[a] = b  # a server's root is a server: the group is named after one of its servers
    return {nodeid: find(module) for nodeid, module in modules.items()}


@contextlib.contextmanager
def turn(shared_dir: Path, alone: bool) -> Iterator[None]:
    """A test's turn on the machine: shared with the other worker's tests, or, `alone`, with none. A reader-writer
    lock (flock) behind a gate: a test waiting to run alone holds the gate, so the other worker's next test waits
    for it rather than overtaking it again and again."""
    with open(shared_dir / "turn.gate", "a") as gate, open(shared_dir / "turn.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # closing the files releases both locks
