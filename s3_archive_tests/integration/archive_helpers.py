"""Running the archive asset against the session's real services, and reading its output back."""

from __future__ import annotations

import logging

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.assets import build_archive_asset
from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.io.s3 import list_objects, read_manifest
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.objects import STAGING, manifest_key
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.kafka_helpers import Rec, jsonl_records, parquet_records

log = logging.getLogger("s3_archive_tests")


def archive_config(bucket: str, topic: str, prefix: str, **kw) -> ArchiveConfig:
    """An archive of `topic`; with a `read_path` (and a `task_reader`), under a prefix of its own (each test runs on
    both paths)."""
    if "read_path" in kw:
        prefix = f"{prefix}{kw['read_path']}/"
    if "task_reader" in kw:
        prefix = f"{prefix}{kw['task_reader']}/"
    return ArchiveConfig(name="test", topics=[topic], bucket=bucket, prefix=prefix, **kw)


def s3_resource(services) -> S3Resource:
    return S3Resource(endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                      aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])


def resources(services, kafka, spark_resource) -> dict:
    return {"kafka": kafka, "spark": spark_resource, "s3": s3_resource(services)}


def materialize(cfg: ArchiveConfig, topic: str, windows: list[OffsetWindow], res: dict,
                instance: dg.DagsterInstance | None = None, raise_on_error: bool = True,
                tags: dict[str, str] | None = None) -> dg.ExecuteInJobResult:
    """One run over `windows` (a partition range when more than one, as a UI backfill does)."""
    instance = instance or dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    asset = build_archive_asset(cfg, topic)
    if len(windows) == 1:
        return dg.materialize([asset], instance=instance, resources=res, partition_key=windows[0].key,
                              raise_on_error=raise_on_error, tags=tags)
    keys = sorted(w.key for w in windows)
    return dg.materialize([asset], instance=instance, resources=res, raise_on_error=raise_on_error,
                          tags={**(tags or {}), "dagster/asset_partition_range_start": keys[0],
                                "dagster/asset_partition_range_end": keys[-1]})


def window_metadata(result: dg.ExecuteInJobResult) -> dict[str, dict]:
    return {e.partition: {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


def final_objects(s3, cfg: ArchiveConfig, topic: str) -> dict[str, dict]:
    """Every data object under the topic's final layout (not manifests, not staging): key -> {size, etag}."""
    return {o["Key"]: {"size": o["Size"], "etag": o["ETag"]}
            for o in list_objects(s3, cfg.bucket, f"{cfg.prefix}{topic}/")}


def archived_records(s3, cfg: ArchiveConfig, topic: str) -> list[Rec]:
    out: list[Rec] = []
    for key in sorted(final_objects(s3, cfg, topic)):
        body = s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read()
        if key.endswith(".parquet"):
            out += parquet_records(body)
        else:
            out += jsonl_records(body, gzipped=key.endswith(".gz"))
    return out


def staging_objects(s3, cfg: ArchiveConfig, topic: str) -> list[str]:
    return [o["Key"] for o in list_objects(s3, cfg.bucket, f"{cfg.prefix}{STAGING}/{topic}/")]


def manifest(s3, cfg: ArchiveConfig, topic: str, window: OffsetWindow) -> Manifest | None:
    return read_manifest(s3, cfg.bucket, manifest_key(cfg.prefix, topic, window))
