"""The one entry point: `defs`.

Loading touches no network and needs no running service. Three things are read here, once:
- the archive config: `$S3_ARCHIVE_CONFIG`, a config file or a defs folder of component declarations (default: the
  demo's, `local/demo_defs/`, shipped with the package);
- the connection settings (defs/resources.py): one environment variable per Kafka, S3 and Spark setting, each on its
  own (docs/configuration.md, "Environment");
- for archives with a `topic_pattern`, the topics it knows: the topic state file in `$S3_ARCHIVE_STATE_DIR`,
  written by `s3-archive refresh-topics` and the sensor `s3_archive_topic_discovery`, never by loading.
Every connection value is a `dg.EnvVar`, resolved when a run or a sensor tick starts, never at import.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from s3_archive.config.settings import KeyPaths, Settings, load_settings, resolve_topic_patterns
from s3_archive.defs.archive.assets import build_archive_assets
from s3_archive.defs.archive.automation import build_archive_automation
from s3_archive.defs.archive.discovery import build_topic_discovery_sensor
from s3_archive.defs.catalog.assets import build_catalog_defs
from s3_archive.defs.lifecycle.assets import build_lifecycle_defs
from s3_archive.defs.recovery.jobs import build_recovery_job
from s3_archive.defs.recovery.sensors import build_capture_sensors
from s3_archive.defs.resources import build_resources
from s3_archive.defs.restore.assets import build_restore_defs
from s3_archive.io.paths import topic_state_file
from s3_archive.io.topic_state import read_known_topics

DEMO_CONFIG = Path(__file__).parent / "local" / "demo_defs"  # the demo's archives, declared as components
REFRESH_HINT = ("run `s3-archive refresh-topics` and reload the code location, or let the sensor "
                "s3_archive_topic_discovery do both")


def build_defs(settings: Settings, known_topics: Mapping[str, Sequence[str]] | None = None) -> dg.Definitions:
    """Each domain contributes its own definitions; resources are shared.

    `known_topics`: per archive name, the topics its `topic_pattern` knows (the topic state); an archive gets its
    explicit `topics` plus those that its pattern matches."""
    resolved = resolve_topic_patterns(settings, known_topics or {})
    idle = [a.name for a in resolved.archives if not a.topics]
    if idle:  # a topic_pattern that knows no topic yet: no assets, sensors or checks for that archive
        warnings.warn(f"archives whose topic_pattern knows no topic yet: {', '.join(idle)}; {REFRESH_HINT}",
                      stacklevel=2)
    # Every run executes its steps in the run's own process (an archive run is one step): Dagster's default
    # multiprocess executor would start a second Python process per step, importing and loading all of this again
    # (seconds per run; docs/performance.md, "The deployed shape"). Step retries happen in the same process.
    parts = [dg.Definitions(resources=build_resources(), executor=dg.in_process_executor)]
    if any(a.topic_pattern is not None for a in settings.archives):
        loaded = {a.name: a.topics for a in resolved.archives}
        parts.append(dg.Definitions(sensors=[build_topic_discovery_sensor(settings, loaded)]))
    active = resolved.model_copy(update={"archives": [a for a in resolved.archives if a.topics]})
    if active.archives:
        parts += [
            dg.Definitions(assets=build_archive_assets(active.archives)),
            build_archive_automation(active),
            # Their refusals name key paths of the config as loaded, not of the resolved one.
            build_catalog_defs(active, paths=KeyPaths.of(settings)),
            build_lifecycle_defs(active, paths=KeyPaths.of(settings)),
            build_restore_defs(active),
            dg.Definitions(jobs=[build_recovery_job(active.archives)], sensors=build_capture_sensors(active.archives)),
            # Dagster's default automation sensor starts stopped; the catalog and lifecycle assets are "kept in
            # sync", so theirs runs from the start (the archive itself is driven by the offsets sensors, off by
            # default).
            dg.Definitions(sensors=[dg.AutomationConditionSensorDefinition(
                "s3_archive_sync", target=dg.AssetSelection.key_prefixes(["kafka_catalog"], ["s3_lifecycle"],
                                                                         ["iceberg_maintenance"]),
                default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
                description="Keeps the Glue tables and the S3 lifecycle rules in sync with the archives, and "
                            "maintains their Iceberg tables daily.")]),
        ]
    return dg.Definitions.merge(*parts)


def known_topics(settings: Settings) -> Mapping[str, Sequence[str]] | None:
    """The topic state (for archives with a `topic_pattern`; None when none has one)."""
    patterns = any(a.topic_pattern is not None for a in settings.archives)
    return read_known_topics(topic_state_file()) if patterns else None


def load_defs() -> dg.Definitions:
    """The code location's definitions from the environment: config (a file, or a folder of declarations read as
    one; config/declarations.py), connection settings, topic state."""
    settings = load_settings(Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG)))
    return build_defs(settings, known_topics(settings))


defs = load_defs()
