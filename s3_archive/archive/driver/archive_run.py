"""What an archive run carries, as values instead of piece by piece: the clients and connections it reaches the world
with (`ArchiveContext`), the tests' levers (`ArchiveHooks`, never set in production), the run itself (`ArchiveRun`:
the context, the archive, its attempt id) and each window it writes (`PendingWindow`: where it lives, what Kafka
still had). The topic is what the run archives, not what it carries: it travels apart, to where a name, a key or a
read needs it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from s3_archive.archive.driver.commit import Fault, no_fault
from s3_archive.archive.driver.output import Output
from s3_archive.archive.protocol import JobTemplate, KafkaConnection, S3Connection, Slice
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.registry_client import RegistryConnection
from s3_archive.io.s3 import S3Client
from s3_archive.keys.objects import WindowLocation
from s3_archive.model.logger import Logger
from s3_archive.model.windows import OffsetWindow

if TYPE_CHECKING:  # pyspark is imported by a run that writes, not when the definitions load
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ArchiveContext:
    """What an archive run reaches the world with: the Spark session, Kafka, the driver's S3 client, how the
    executors reach S3 (`conn`), how an Iceberg catalog's JVM clients reach S3 and Glue (`endpoint`), the Schema
    Registry of an archive that decodes registry payloads, and the run's log."""

    spark: SparkSession
    kafka: KafkaResource
    s3: S3Client
    conn: S3Connection
    endpoint: S3Endpoint
    log: Logger
    registry: RegistryConnection | None = None
    # asked before each window's commit; raises RunEnded once the run this step belongs to has ended (a step whose
    # run process died goes on as an orphan: it must not commit what the run's failure says was not)
    still_running: Callable[[], None] = lambda: None

    @classmethod
    def of_client(cls, spark: SparkSession, kafka: KafkaResource, s3: S3Client, log: Logger,
                  registry: RegistryConnection | None = None) -> ArchiveContext:
        """Tests, benchmarks and the local stack: the executors and an Iceberg catalog reach S3 as the driver's
        client does."""
        return cls(spark, kafka, s3, S3Connection.of_client(s3), S3Endpoint.of_client(s3), log, registry)


@dataclass(frozen=True)
class ArchiveHooks:
    """Tests' and benchmarks' levers on a run: `fault` stops the driver's commit after a step (commit.py's
    CommitStep), `write_fault` a write task (protocol.py's TaskFault); `job_options` overrides JobTemplate fields
    (multipart_threshold, part_size)."""

    fault: Fault = no_fault
    write_fault: str | None = None
    job_options: dict[str, Any] = field(default_factory=dict)


NO_HOOKS = ArchiveHooks()


def attempt_id() -> str:
    """A new attempt's id: when it started, and random (unique per run: a manifest names the attempt that wrote it)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ArchiveRun:
    """One run of an archive's windows: what it carries, the archive and its output as the write job sees it, the
    hooks, the attempt id and when the run started."""

    ctx: ArchiveContext
    cfg: ArchiveConfig
    out: Output
    hooks: ArchiveHooks = NO_HOOKS
    attempt: str = field(default_factory=attempt_id)
    t0: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, ctx: ArchiveContext, cfg: ArchiveConfig, hooks: ArchiveHooks = NO_HOOKS) -> ArchiveRun:
        return cls(ctx, cfg, Output.of(cfg), hooks)

    def seconds(self) -> float:
        """Since the run started."""
        return time.monotonic() - self.t0

    def template(self, topic: str, slices: Iterable[Slice] = (), kafka: KafkaConnection | None = None,
                 ) -> JobTemplate:
        """The run's write jobs of `topic` before their format: the archive's bucket and prefix, the executors' S3
        connection, `slices`, `kafka` (read_path librdkafka), and the hooks' write fault and job options."""
        return JobTemplate(topic=topic, bucket=self.cfg.bucket, prefix=self.cfg.prefix, conn=self.ctx.conn,
                           slices=tuple(slices), fault=self.hooks.write_fault, kafka=kafka,
                           task_reader=self.out.task_reader, **self.hooks.job_options)


@dataclass
class PendingWindow:
    """A window this run writes: where it lives, the first offset Kafka still had when the run looked
    (`read_start`), the offset ranges lost to retention before it, and the slices its tasks read."""

    where: WindowLocation
    read_start: int
    lost: list[list[int]]
    slices: list[Slice]

    @property
    def window(self) -> OffsetWindow:
        return self.where.window
