"""Where s3-archive keeps things on disk: the JVM jar cache, the local stack's state, and the state of the code
location (the topics each `topic_pattern` knows).

Everything lives under one home directory, `$S3_ARCHIVE_HOME` (default `~/.cache/s3-archive`), outside git.
These are functions, not constants, so nothing is read from the environment at import time.

"""

from __future__ import annotations

import os
from pathlib import Path

from s3_archive.model.errors import MissingJars

JAR_GROUPS = ("kafka-broker", "kafka-tools", "spark", "iceberg")  # kafka-tools: Kafka's own command-line tools (tests)


def home() -> Path:
    return Path(os.environ.get("S3_ARCHIVE_HOME", Path.home() / ".cache" / "s3-archive")).expanduser()


def jar_dir(group: str) -> Path:
    if group not in JAR_GROUPS:
        raise ValueError(f"unknown jar group {group!r}; allowed: {', '.join(JAR_GROUPS)}")
    return home() / "jars" / group


def jars(group: str) -> list[Path]:
    """The fetched jars of one group, sorted; a clear error if `scripts/fetch-jars` has not run."""
    found = sorted(jar_dir(group).glob("*.jar"))
    if not found:
        raise MissingJars(
            f"no {group} jars in {jar_dir(group)}; run `scripts/fetch-jars` (or `make setup`) to fetch them "
            "from Maven Central"
        )
    return found


def optional_jars(group: str) -> list[Path]:
    """The fetched jars of a group that only some archives need (iceberg); none if it was not fetched."""
    return sorted(jar_dir(group).glob("*.jar"))


def spark_jars() -> list[Path]:
    """A Spark driver's jars, in classpath order: the spark group, then Iceberg's runtime when fetched (the AppCDS
    archive, local/cds.py, is dumped and found with exactly this list)."""
    return [*jars("spark"), *optional_jars("iceberg")]


def default_local_dir() -> Path:
    return home() / "local"


def local_stack_dir() -> Path:
    return Path(os.environ.get("S3_ARCHIVE_LOCAL_DIR", default_local_dir())).expanduser()


def state_dir() -> Path:
    """The code location's own state (the topics each `topic_pattern` knows): `$S3_ARCHIVE_STATE_DIR`, default
    `$S3_ARCHIVE_HOME/state`. It must outlive code-location restarts (a volume in a deployment)."""
    return Path(os.environ.get("S3_ARCHIVE_STATE_DIR", home() / "state")).expanduser()


def topic_state_file() -> Path:
    return state_dir() / "topics.json"
