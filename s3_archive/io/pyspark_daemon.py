"""PySpark's worker daemon for the sessions of `SparkResource` (`spark.python.daemon.module`): PySpark's own
`pyspark.daemon`, started after taking off the Python path the archives Spark puts there when they only repeat the
installed pyspark.

Spark starts the daemon with `$SPARK_HOME/python/lib/pyspark.zip`, py4j's zip and the spark-core jar ahead of
everything else on PYTHONPATH. When pyspark is pip-installed, `$SPARK_HOME` is that installed package, so the zip
holds the very same files. Imported from a zip, every module is compiled again at every start (zipimport keeps no
bytecode cache): `import pyspark.worker` took 0.8 s from the zip, 0.2 s from the installed package. And for each
task PySpark's `setup_spark_files` calls `importlib.invalidate_caches()`, which makes every zip importer re-read its
archive's directory (0.13 s a task for the three; the jar alone lists 5,358 files and holds no Python).

Anything else (a Spark distribution with its own python/lib, another pyspark version): the path is left as Spark
made it. Run as `python -m s3_archive.io.pyspark_daemon pyspark.worker`, as Spark runs any daemon module.

The daemon also imports what every archive write task needs before it forks the workers (`preload`). Spark stops
a Python worker that has been idle for a minute, and a sensor's runs come minutes apart, so most runs of a
long-lived session meet no worker left and fork new ones: each used to import the write path (pyarrow, pandas
through PySpark's Arrow serializer, boto3) and build botocore's S3 model, ~1.3 CPU-s per worker, 4 workers at once
on this 2-core machine (docs/performance.md, "Python workers"). Forked from a daemon that has them, a
worker starts with them.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

# What a write task imports (archive/executor/task.py through encoders and upload; PySpark's Arrow path of mapInArrow;
# the native reader of task_reader native, a shared library loaded once here).
PRELOAD = ("s3_archive.archive.executor.task", "s3_archive.archive.executor.native_read", "s3_archive_native",
           "pyarrow.parquet", "pyspark.sql.pandas.serializers", "pandas", "boto3", "botocore.config")


def same_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """The function of `io/spark.py::start_python_workers`'s one-row mapInArrow job: its batches as they are.
    It lives here because a worker unpickles it by reference, importing its module: this one imports only the
    standard library, where io/spark.py imports dagster (about 1.5 CPU-s in a new worker, beside the driver's
    planning on the same cores)."""
    yield from batches


def redundant_paths(path: list[str], spark_home: str | None) -> list[str]:
    """The entries of `path` that repeat an installed pyspark: Spark's zips under `$SPARK_HOME/python/lib` and
    the jars Spark adds, when `$SPARK_HOME` is the pyspark package found on the rest of `path` (py4j's zip only
    when py4j is installed there too). Empty otherwise."""
    if not spark_home:
        return []
    home = os.path.realpath(spark_home)
    lib = os.path.join(home, "python", "lib") + os.sep
    added = [p for p in path if p.endswith(".jar") or (p.endswith(".zip") and os.path.realpath(p).startswith(lib))]
    rest = [p for p in path if p not in added]
    if not any(os.path.realpath(os.path.join(p or ".", "pyspark")) == home for p in rest):
        return []
    if not any(os.path.isdir(os.path.join(p or ".", "py4j")) for p in rest):
        added = [p for p in added if not os.path.basename(p).startswith("py4j")]
    return added


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import `modules` and load botocore's S3 model into boto3's default session, so that the workers this
    process forks start with them; then freeze the objects made so far out of the garbage collector (Python's
    advice before forking: the workers' collections do not touch, and so copy, the shared pages). Nothing here
    starts a thread or opens a connection, which a fork would not survive. A failure only costs the speed-up: it
    is written to stderr (the executor's log; stdout is the daemon's channel to the JVM) and returned."""
    failed: list[str] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import error: the workers import it themselves
            failed.append(f"{name}: {type(e).__name__}: {e}")
    if "boto3" in sys.modules:
        try:
            # Placeholder keys: no credential lookup (which could ask an instance metadata service); the client
            # is thrown away, the default session keeps the loaded S3 model and endpoint rules.
            sys.modules["boto3"].client("s3", region_name="us-east-1", aws_access_key_id="preload",
                                        aws_secret_access_key="preload")
        except Exception as e:  # noqa: BLE001 - e.g. AWS_PROFILE naming a missing profile
            failed.append(f"boto3 S3 model: {type(e).__name__}: {e}")
    for f in failed:
        print(f"s3_archive.io.pyspark_daemon: not preloaded ({f})", file=sys.stderr, flush=True)
    gc.freeze()
    return failed


def main() -> None:
    for p in redundant_paths(sys.path, os.environ.get("SPARK_HOME")):
        sys.path.remove(p)
        sys.path_importer_cache.pop(p, None)  # else invalidate_caches() re-reads its directory at every task
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
