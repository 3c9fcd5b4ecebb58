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
"""

from __future__ import annotations

import os
import sys


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


def main() -> None:
    for p in redundant_paths(sys.path, os.environ.get("SPARK_HOME")):
        sys.path.remove(p)
        sys.path_importer_cache.pop(p, None)  # else invalidate_caches() re-reads its directory at every task
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
