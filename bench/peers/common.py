"""What the peers share: their jar groups in the cache, a JVM child process stopped by PID, its log4j2 configuration
and AWS environment, and the figures every peer reports (`PeerResult`)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.under_test import LOCAL_AWS, paths, spawn, stop_pid

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


class PeerUnavailable(RuntimeError):
    """A peer cannot run here (its jars are missing, or it failed); the message says what failed."""


def jar_dir(group: str) -> Path:
    """A bench jar group fetched by `scripts/fetch-jars bench` (jvm/<group>/pom.xml)."""
    d = paths.home() / "jars" / group
    if not any(d.glob("*.jar")):
        raise PeerUnavailable(f"no {group} jars in {d}; run `scripts/fetch-jars bench` (make bench does)")
    return d


def log4j2_properties(log: Path, level: str, **loggers: str) -> str:
    """A JVM peer's log4j2 configuration: everything into `log` at `level`, some loggers at their own level
    (`kafka="org.apache.kafka:WARN"`: the logger org.apache.kafka at WARN)."""
    text = LOG4J2.format(log=log, level=level)
    for key, spec in loggers.items():
        name, lvl = spec.rsplit(":", 1)
        text += f"logger.{key}.name = {name}\nlogger.{key}.level = {lvl}\n"
    return text


def aws_env() -> dict[str, str]:
    """The (moto) credentials and region for a JVM peer's AWS SDK: from its environment, not its command line."""
    return {k: LOCAL_AWS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}


def java() -> str:
    j = shutil.which("java")
    if j is None:
        raise PeerUnavailable("java not found on PATH")
    return j


@dataclass
class PeerResult:
    """One run of a peer over the whole workload.

    visible_s: from the peer's process start (or the query's start, for a peer in a warm session) until every
    record was committed where a reader sees it. steady_records_per_s: the rate between the peer's first and
    last commit (committed records / time between those commits), which leaves out start-up and the wait for the
    last commit; None with fewer than two commits."""

    records: int
    visible_s: float
    commits: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, records committed)
    steady_records_per_s: float | None = None
    objects: int = 0
    bytes_written: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def steady_rate(commits: list[tuple[float, int]]) -> float | None:
    """Records per second between the first and the last commit that added records."""
    pts = sorted({c for c in commits if c[1] > 0})
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


class JavaProcess:
    """A JVM child in its own process group, logging to a file; stopped by its PID."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.proc: subprocess.Popen = spawn(cmd, log, env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_pid(self.proc.pid)
