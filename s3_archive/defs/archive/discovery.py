"""The topic discovery sensor `s3_archive_topic_discovery`: adds the topics each `topic_pattern` now matches on
Kafka to the topic state (io/topic_state.py), as `s3-archive refresh-topics` does.

Definitions never connect to Kafka when they load: they read that state. A topic this sensor finds gets its assets,
checks and lifecycle rules at the next code-location reload (UI: Deployment → Reload, or a redeploy).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import dagster as dg

from s3_archive.config.settings import Settings
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.paths import topic_state_file
from s3_archive.io.topic_state import refresh_topics

DISCOVERY_SENSOR = "s3_archive_topic_discovery"
# New topics only appear at the next reload anyway; one metadata request every 5 minutes is plenty.
DISCOVERY_INTERVAL_SECONDS = 300
RELOAD_HINT = "reload the code location (Deployment → Reload) to archive them"


def describe(added: dict[str, list[str]]) -> str:
    return "; ".join(f"archive {name!r}: {', '.join(ts)}" for name, ts in sorted(added.items()))


def build_topic_discovery_sensor(settings: Settings) -> dg.SensorDefinition:
    patterns = ", ".join(f"{a.name} ({a.topic_pattern!r})" for a in settings.archives if a.topic_pattern)

    # Running by default: it only reads topic metadata and writes the state file, launches nothing, and without it
    # a new topic waits for someone to run `s3-archive refresh-topics` by hand.
    @dg.sensor(
        name=DISCOVERY_SENSOR,
        minimum_interval_seconds=DISCOVERY_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Adds the Kafka topics matching the topic_pattern of {patterns} to the topic state; new topics "
                    "get their assets at the next code-location reload. Launches no run.",
    )
    def _discovery(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SkipReason:
        # KafkaUnavailable fails the tick and leaves the state as it was.
        result = refresh_topics(settings, kafka, topic_state_file())
        for name, gone in sorted(result.gone.items()):
            context.log.warning(f"archive {name!r}: known topics no longer in Kafka (kept; `s3-archive "
                                f"refresh-topics --forget TOPIC` removes one): {', '.join(gone)}")
        message = (f"new topics: {describe(result.added)}; {RELOAD_HINT}" if result.added
                   else f"no new topics ({sum(map(len, result.known.values()))} known)")
        context.log.info(message)
        return dg.SkipReason(message)

    return _discovery
