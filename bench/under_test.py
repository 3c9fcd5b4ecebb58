"""Every name the benchmark's orchestrating side takes from s3_archive (the suite's areas, the peers, the years of
windows, the reliability matrix, the tools' parent processes), in one place: when the package's modules move, this
file is the one to follow them. The Spark side (bench/worker.py, a process whose imports are timed) and the PySpark
daemon of bench/tools/timeline_daemon.py import what they run themselves."""

from __future__ import annotations

from s3_archive.archive.executor import kafka_read, native_read
from s3_archive.archive.protocol import KafkaConnection
from s3_archive.archive.retirement import Retired
from s3_archive.archive.verify import verify_topic
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import parse_settings, resolve_topic_patterns
from s3_archive.defs.archive.checks import (
    contiguity_result,
    headroom_result,
    objects_result,
    retention_result,
)
from s3_archive.defs.archive.discovery import build_topic_discovery_sensor
from s3_archive.defs.archive.instance import TopicView, record_retired
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.sensors import build_offsets_sensor, evaluate
from s3_archive.defs.webserver import WebserverResource
from s3_archive.io import paths
from s3_archive.io.jvm import driver_java_options
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import delete_keys, list_objects
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import SparkResource
from s3_archive.io.topic_state import read_known_topics
from s3_archive.local.fault_proxy import FaultProxy
from s3_archive.local.kafka_broker import KafkaBroker
from s3_archive.local.postgres import PostgresServer
from s3_archive.local.processes import free_port, spawn, stop_pid, wait_until
from s3_archive.local.registry_server import SchemaRegistryServer
from s3_archive.local.spark_connect import SparkConnectServer
from s3_archive.local.stack import LOCAL_AWS, local_s3_client, temporary_stack
from s3_archive.model.errors import KafkaUnavailable
from s3_archive.model.formats import FORMATS
from s3_archive.model.windows import OffsetWindow
from s3_archive.recovery.capture import capture
from s3_archive.recovery.recover import Recovery, RecoveryOptions
from s3_archive.restore.request import (
    DEFAULT_PRODUCER,
    DEFAULT_PRODUCERS,
    DEFAULT_TRANSACTION_RECORDS,
    RestoreContext,
    RestoreRequest,
)
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource, archived_windows

__all__ = [
    "DEFAULT_PRODUCER", "DEFAULT_PRODUCERS", "DEFAULT_TRANSACTION_RECORDS", "FORMATS", "LOCAL_AWS", "ArchiveConfig", "ArchiveSource",
    "FaultProxy", "KafkaBroker", "KafkaConnection", "KafkaResource", "KafkaUnavailable", "OffsetWindow",
    "PostgresServer", "Recovery", "RecoveryOptions", "RestoreContext", "RestoreRequest",
    "Retired", "S3Resource", "SchemaRegistryServer", "SparkConnectServer", "SparkResource", "TopicView",
    "WebserverResource", "archive_asset_key", "kafka_read", "native_read", "build_offsets_sensor",
    "build_topic_discovery_sensor", "archived_windows", "capture", "contiguity_result", "delete_keys",
    "driver_java_options", "evaluate", "free_port", "headroom_result", "list_objects", "local_s3_client",
    "objects_result", "parse_settings", "paths", "read_known_topics", "record_retired", "resolve_topic_patterns",
    "restore_windows", "retention_result", "spawn", "stop_pid", "temporary_stack", "verify_topic", "wait_until",
    "window_partitions",
]
