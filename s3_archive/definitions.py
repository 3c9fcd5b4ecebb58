"""The one entry point: `defs`.

Loading needs no running service. Two things are chosen here, once:
- the archive config file: `$S3_ARCHIVE_CONFIG`, default the demo config shipped with the package;
- the environment (`$S3_ARCHIVE_ENV`): `local` (default: the embedded stack's endpoints, path-style S3) or `aws`
  (no endpoint override; AWS's default credential chain unless keys are given).
Every connection value is a `dg.EnvVar`, resolved when a run starts, never at import.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from s3_archive.config.settings import Settings, load_settings, resolve_topic_patterns
from s3_archive.defs.archive.assets import build_archive_assets
from s3_archive.defs.archive.sensors import build_archive_automation
from s3_archive.defs.catalog import build_catalog_defs
from s3_archive.defs.lifecycle import build_lifecycle_defs
from s3_archive.defs.restore.assets import build_restore_defs
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.spark import SparkResource
from s3_archive.model.errors import KafkaUnavailable

DEMO_CONFIG = Path(__file__).parent / "local" / "demo_archives.yaml"


def build_resources(env: str) -> dict[str, dg.ConfigurableResource]:
    if env not in ("local", "aws"):
        raise ValueError(f"S3_ARCHIVE_ENV must be 'local' or 'aws', got {env!r}")
    kafka = KafkaResource(
        bootstrap_servers=dg.EnvVar("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS"),
        **({} if env == "local" else {
            "security_protocol": dg.EnvVar("S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL"),
            "sasl_mechanism": dg.EnvVar("S3_ARCHIVE_KAFKA_SASL_MECHANISM"),
            "sasl_username": dg.EnvVar("S3_ARCHIVE_KAFKA_SASL_USERNAME"),
            "sasl_password": dg.EnvVar("S3_ARCHIVE_KAFKA_SASL_PASSWORD"),
        }),
    )
    if env == "local":
        endpoint = dg.EnvVar("S3_ARCHIVE_S3_ENDPOINT_URL")
        s3 = S3Resource(endpoint_url=endpoint, region_name=dg.EnvVar("AWS_REGION"),
                        aws_access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
                        aws_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"))
        spark = SparkResource(s3_endpoint_url=endpoint, s3_region=dg.EnvVar("AWS_REGION"),
                              s3_access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
                              s3_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"), s3_path_style=True)
    else:
        s3 = S3Resource(region_name=dg.EnvVar("AWS_REGION"))
        spark = SparkResource(s3_region=dg.EnvVar("AWS_REGION"), master=dg.EnvVar("S3_ARCHIVE_SPARK_MASTER"))
    return {"kafka": kafka, "s3": s3, "spark": spark}


def discover_topics(settings: Settings, timeout_s: float = 5.0) -> Settings:
    """Expand `topic_pattern`s against the cluster when definitions load.

    Loading must work with no service running: if Kafka cannot be reached in `timeout_s`, the archives keep only
    their explicit topics and a warning says so. Topics created later appear when the code location reloads
    (UI: Deployment > Reload, or a redeploy) — that reload is the mechanism, and its delay.
    """
    if all(a.topic_pattern is None for a in settings.archives):
        return settings
    bootstrap = os.environ.get("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS")
    topics: list[str] = []
    if bootstrap:
        try:
            topics = KafkaResource(bootstrap_servers=bootstrap, timeout_s=timeout_s).topics()
        except KafkaUnavailable as e:
            warnings.warn(f"topic_pattern: {e}; archiving only the explicitly listed topics until the next reload",
                          stacklevel=2)
    return resolve_topic_patterns(settings, topics)


def build_defs(settings: Settings, env: str = "local") -> dg.Definitions:
    """Each domain contributes its own definitions; resources are shared."""
    idle = [a.name for a in settings.archives if not a.topics]
    if idle:  # a topic_pattern that matched nothing (yet): no assets, sensors or checks for that archive
        warnings.warn(f"archives with no topics yet: {', '.join(idle)}", stacklevel=2)
        if len(idle) == len(settings.archives):
            return dg.Definitions(resources=build_resources(env))
        settings = settings.model_copy(update={"archives": [a for a in settings.archives if a.topics]})
    return dg.Definitions.merge(
        dg.Definitions(assets=build_archive_assets(settings.archives), resources=build_resources(env)),
        build_archive_automation(settings),
        build_catalog_defs(settings),
        build_lifecycle_defs(settings),
        build_restore_defs(settings),
        # Dagster's default automation sensor starts stopped; the catalog and lifecycle assets are "kept in sync",
        # so theirs runs from the start (the archive itself is driven by the offsets sensors, off by default).
        dg.Definitions(sensors=[dg.AutomationConditionSensorDefinition(
            "s3_archive_sync", target=dg.AssetSelection.key_prefixes(["kafka_catalog"], ["s3_lifecycle"]),
            default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
            description="Keeps the Glue tables and the S3 lifecycle rules in sync with the archives.")]),
    )


defs = build_defs(
    discover_topics(load_settings(Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG)))),
    os.environ.get("S3_ARCHIVE_ENV", "local"),
)
