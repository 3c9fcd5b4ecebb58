"""JVM options of the Spark driver, by the kind of process it lives in (`SparkResource.jvm_profile`).

- `short`: a run's own process (Dagster launches one per run), which starts a JVM, archives and exits. C1 only
  (`-XX:TieredStopAtLevel=1`): C2 spends seconds of CPU compiling hot code that a short process never amortizes.
  The serial collector (`-XX:+UseSerialGC`): G1 grows its heap to meet its GC-time goal as the window grows (the
  Kafka source's fetch buffers are humongous objects in 1 MB regions) and keeps 50-65 MB of its own structures;
  the serial collector grows the heap only when the old generation fills (docs/benchmarks.md, "Memory").
  With the AppCDS archive (`-XX:SharedArchiveFile`) of the driver's classpath, when `scripts/setup` has built it,
  the ~25,000 classes of Spark, Hadoop and the AWS SDK are mapped instead of loaded and verified one by one.
- `long`: a session that lives across many runs (a notebook, a benchmark's warm worker, a Connect server): the
  JVM's default tiered JIT (C2 pays off after warm-up), plus the AppCDS archive when built.

The archive is only valid for the exact JDK and classpath it was dumped with, so its file name carries a
fingerprint of both; a changed jar or JDK simply finds no archive (no flag, no warning) until setup rebuilds it.
Beside each archive a list of the files of its fingerprint: setup removes the archives whose files are gone or
changed and keeps those of other installations on the host (`stale_archives`).
docs/benchmarks.md ("Run overhead") measures each flag's gain.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from s3_archive.io import paths

JVM_PROFILES = ("short", "long")
C1_ONLY = "-XX:TieredStopAtLevel=1"
SERIAL_GC = "-XX:+UseSerialGC"
ARCHIVE_PREFIX = "spark-driver-"


def java_home() -> Path | None:
    """The JDK pyspark launches: `$JAVA_HOME`, else the one of `java` on PATH."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def _pyspark_jars() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return []
    return sorted((Path(spec.origin).parent / "jars").glob("*.jar"))


def classpath_files(extra_jars: Iterable[Path | str]) -> list[Path]:
    """What an AppCDS archive depends on: the JDK (its libjvm) and every jar of the driver's classpath (the extra
    ones first, then pyspark's)."""
    home = java_home()
    return [*([home / "lib" / "server" / "libjvm.so"] if home is not None else []),
            *(Path(j) for j in extra_jars), *_pyspark_jars()]


def fingerprint(files: Iterable[Path]) -> str:
    """A hash of `files`, each by path, size and modification time (a missing one counts as missing)."""
    h = hashlib.sha256()
    for f in files:
        try:
            st = f.stat()
        except OSError:
            h.update(f"{f}:missing\n".encode())
            continue
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def classpath_fingerprint(extra_jars: Iterable[Path | str]) -> str:
    return fingerprint(classpath_files(extra_jars))


def cds_archive(extra_jars: Iterable[Path | str]) -> Path:
    """Where the AppCDS archive for this JDK and classpath lives (it may not exist)."""
    return paths.home() / "cds" / _archive_name(classpath_fingerprint(extra_jars))


def _archive_name(classpath_print: str) -> str:
    return f"{ARCHIVE_PREFIX}{classpath_print}.jsa"


def classpath_list(archive: Path) -> Path:
    """The file beside an archive that lists the files of its fingerprint, one per line (local/cds.py writes it)."""
    return archive.with_suffix(".classpath")


def stale_archives(directory: Path) -> list[Path]:
    """The archives in `directory` that no JVM can use again: their JDK or a jar of their classpath is gone or
    changed (the fingerprint of the files they list differs from the one in their name), or they list nothing.
    The archives of other installations on this host (another checkout's virtualenv, a CI clone) that are still
    as they were are kept: each of them maps only its own."""
    stale = []
    for archive in sorted(directory.glob(f"{ARCHIVE_PREFIX}*.jsa")):
        listed = classpath_list(archive)
        try:
            files = [Path(line) for line in listed.read_text().splitlines() if line]
        except OSError:
            stale.append(archive)
            continue
        if archive.name != _archive_name(fingerprint(files)):
            stale.append(archive)
    return stale


def driver_java_options(profile: str, extra_jars: Iterable[Path | str]) -> str:
    """`spark.driver.extraJavaOptions` for a profile (see the module docstring)."""
    if profile not in JVM_PROFILES:
        raise ValueError(f"SparkResource.jvm_profile is {profile!r}; allowed: {', '.join(JVM_PROFILES)}")
    opts = [C1_ONLY, SERIAL_GC] if profile == "short" else []
    archive = cds_archive(extra_jars)
    if archive.is_file():
        opts.append(f"-XX:SharedArchiveFile={archive}")
    return " ".join(opts)
