"""Build the AppCDS archive of the Spark driver (see s3_archive/io/jvm.py): `python -m s3_archive.local.cds`.

Called by `scripts/setup`. A training run archives a few small windows (parquet, avro, jsonl and json with value
decoding) through the real archive path against a temporary broker and moto server, in a JVM started with
`-XX:ArchiveClassesAtExit`: the classes a run loads are dumped when that JVM exits. Idempotent: an archive for the
current JDK and jars is kept (`--force` rebuilds it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.payload import ValueDecoding
from s3_archive.io import paths
from s3_archive.io.jvm import cds_archive, classpath_files, classpath_list, stale_archives
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.spark import SparkResource
from s3_archive.local.stack import LOCAL_AWS, local_s3_client, temporary_stack
from s3_archive.model.windows import OffsetWindow

TOPIC = "cds-training"
RECORDS = 2_000
log = logging.getLogger("s3_archive.cds")


def _train(archive: Path) -> None:
    from confluent_kafka.admin import NewTopic
    from pyspark import SparkContext

    with temporary_stack("s3a-cds-", "cds", broker_heap="256m", remove=True) as (broker, moto, _):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        kafka.admin().create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        producer = kafka.producer()
        for i in range(RECORDS):
            producer.produce(TOPIC, key=f"k{i % 7}".encode(), value=f'{{"id":{i},"v":"x{i}"}}'.encode(),
                             headers=[("trace", f"{i:08x}".encode())], partition=0)
        producer.flush(60)
        del producer  # librdkafka clients left alive would log refused connections once the stack stops
        kafka.close()
        spark = SparkResource(
            s3_endpoint_url=moto.endpoint_url, s3_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
            s3_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True, app_name="cds-training",
            # cds*=error: the dump warns for every class it skips (signed jars, generated accessors), by design
            extra_conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds*=error"},
        ).session()
        s3 = local_s3_client(moto.endpoint_url)
        configs = [("parquet", {}), ("avro", {}), ("jsonl", {}),
                   ("json", {"value_decoding": ValueDecoding(type="json")})]
        for i, (fmt, extra) in enumerate(configs):
            cfg = ArchiveConfig(name="cds", topics=[TOPIC], bucket="cds", prefix=f"{fmt}/", format=fmt, **extra)
            w = OffsetWindow(0, i * 500, (i + 1) * 500)
            archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, TOPIC, w)
        spark.stop()
        # The dump happens when the JVM exits, which it does when its stdin (the gateway's pipe) closes.
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is not None:
            gateway.shutdown()
        if proc is not None:
            proc.stdin.close()
            proc.wait(timeout=300)


def build(force: bool = False) -> Path:
    """The archive for the current JDK and jars, trained now unless it exists (or `force`); archives no JVM can
    use again are removed (jvm.stale_archives), those of other installations on this host are kept."""
    jars = paths.spark_jars()
    archive = cds_archive(jars)
    archive.parent.mkdir(parents=True, exist_ok=True)
    for old in stale_archives(archive.parent):
        old.unlink(missing_ok=True)
        classpath_list(old).unlink(missing_ok=True)
    if archive.is_file() and not force:
        print(f"cds: {archive.name} up to date ({archive.parent})")
        return archive
    tmp = archive.with_name(f"training-{archive.name}")
    tmp.unlink(missing_ok=True)
    t = time.monotonic()
    print("cds: training the Spark driver's AppCDS archive (a few small windows against a temporary broker and "
          "moto server; a minute or two)", flush=True)
    _train(tmp)
    if not tmp.is_file():
        raise RuntimeError(f"the training JVM exited without writing {tmp}; see its output above")
    classpath_list(archive).write_text("".join(f"{f}\n" for f in classpath_files(jars)))
    os.replace(tmp, archive)
    print(f"cds: wrote {archive} ({archive.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - t:.0f}s")
    return archive


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="rebuild even if an archive for these jars exists")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    build(args.force)


if __name__ == "__main__":
    main()
