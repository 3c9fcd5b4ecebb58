"""Spark's own launch scripts from the venv's pyspark (`bin/spark-class`), for the local stack's Spark servers: a
Spark Connect server and a standalone master + worker. Each server gets its own conf directory (Spark's
`SPARK_CONF_DIR`): log4j2 to a file, and `spark-defaults.conf` (mode 0600) for settings that must stay out of the
process list.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from s3_archive.io import paths
from s3_archive.local.processes import StackError

_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def spark_home() -> Path:
    """The pyspark package directory: pip's pyspark is a whole Spark distribution (bin/, jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StackError("pyspark is not installed in this Python; run `scripts/setup`")
    return Path(spec.origin).parent


def spark_class(main: str, *args: str) -> list[str]:
    """`bin/spark-class MAIN ARGS`: Spark's launcher builds the java command and execs it (the PID stays ours)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise StackError("java not found on PATH; install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)")
    return [str(spark_home() / "bin" / "spark-class"), main, *args]


def project_jars() -> list[str]:
    """The jars `scripts/fetch-jars` put in the cache for Spark (Kafka source, Avro, S3A and the AWS SDK)."""
    return [str(p) for p in paths.jars("spark")]


def conf_dir(root: Path, log: Path, defaults: dict[str, str] | None = None, level: str = "WARN") -> Path:
    """A Spark conf directory under `root`: log4j2 writing to `log`, and `defaults` as spark-defaults.conf, which
    only its owner can read (it may hold credentials)."""
    conf = root / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "log4j2.properties").write_text(_LOG4J2.format(level=level, log=log))
    target = conf / "spark-defaults.conf"
    target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k} {v}\n" for k, v in (defaults or {}).items()))
    return conf


def spark_env(conf: Path, work: Path) -> dict[str, str]:
    """The environment of a Spark server process: this pyspark as SPARK_HOME, our conf dir, everything bound to
    127.0.0.1, this Python for PySpark workers."""
    return {
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOG_DIR": str(work),
        "SPARK_PID_DIR": str(work),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
    }
