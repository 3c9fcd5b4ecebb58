"""A restore target of an archive (`restore_targets:` of an archive): a restore declared in the YAML, so the UI can
launch it over selected windows with no run config (docs/restore.md, "Restore targets")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, field_validator, model_validator

from s3_archive.config.names import TOPIC, check_name
from s3_archive.model.base import StrictModel

TOPIC_SLOT = "{topic}"


class RestoreTarget(StrictModel):
    """Where and how the windows of an archive's topics are restored; each (target, topic) is one restore asset
    `kafka_restore_target/<name>/<topic>` with the archive's window partitions."""

    name: str = Field(description="the target's name: a-z 0-9 _, unique within the archive")
    target_topic: str = Field(description="existing topic to produce into; `{topic}` is replaced by the source "
                                          "topic, e.g. '{topic}.restored'")
    topics: list[str] | None = Field(default=None, description="only these topics of the archive; None: all")
    partition_mapping: Literal["same", "murmur2", "map"] = "same"
    # Keys as YAML ints or as strings (a config written as JSON): "0" is read as 0.
    partition_map: dict[Annotated[int, Strict(False)], int] = Field(
        default_factory=dict, description="with partition_mapping: map, source -> target partition")
    provenance_headers: bool = False
    allow_source_topic: bool = False
    from_timestamp_ms: int | None = None
    to_timestamp_ms: int | None = None
    from_offset: int | None = Field(default=None, ge=0)
    to_offset: int | None = Field(default=None, ge=0)
    transaction_records: int = Field(default=500_000, ge=1)
    broker_outage_seconds: float = Field(default=60.0, ge=0, le=3600, description="how long a run keeps "
                                         "re-initialising its producer after the target cluster became unreachable")
    producers: int = Field(default=2, ge=1, le=16, description="transactional producers side by side, each "
                           "producing the source partitions of its share of the target's partitions")
    producer: Literal["python", "native"] = Field(default="native", description="the client that produces: native "
                                                  "(native/'s producer of Arrow batches) or python (confluent-kafka)")
    dry_run: bool = Field(default=False, description="a preview target: every run only plans (counts), "
                                                     "whatever the run config says")
    mode: Literal["manual", "follow"] = Field(default="manual", description="follow: a sensor restores each window "
                                              "as soon as the archive commits it")
    wait_for_cold_seconds: int = Field(default=0, ge=0)
    cold_restore_days: int = Field(default=7, ge=1)
    cold_restore_tier: Literal["Standard", "Bulk", "Expedited"] = "Standard"
    schema_subjects: Literal["keep_ids", "topic_name", "record_name", "topic_record_name"] = Field(
        default="keep_ids", description="Schema Registry payloads: keep_ids restores them byte for byte; a subject "
                                        "name strategy registers each archived schema in the restore's Schema "
                                        "Registry under its subject and rewrites each record's schema id")
    unlisted_schema_ids: Literal["refuse", "keep"] = Field(
        default="refuse", description="with a subject name strategy, a framed record whose schema id its window's "
                                      "manifest does not list (a dead letter): refuse fails the run before "
                                      "producing it; keep restores it as it is")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("target_topic")
    @classmethod
    def _target(cls, v: str) -> str:
        probe = v.replace(TOPIC_SLOT, "t")
        if not TOPIC.fullmatch(probe) or "{" in probe or "}" in probe:
            raise ValueError(f"not a valid Kafka topic name (a-z A-Z 0-9 . _ -, and `{TOPIC_SLOT}` for the source "
                             f"topic), got {v!r}")
        return v

    @model_validator(mode="after")
    def _ranges(self) -> RestoreTarget:
        if self.partition_mapping == "map" and not self.partition_map:
            raise ValueError("partition_mapping 'map' needs partition_map {source partition: target partition}")
        if self.mode == "follow" and self.dry_run:
            raise ValueError("mode 'follow' restores what the archive commits; a dry_run target only plans: use one "
                             "or the other")
        if self.partition_mapping != "map" and self.partition_map:
            raise ValueError(f"partition_map is only used with partition_mapping 'map', not "
                             f"{self.partition_mapping!r}")
        for lo, hi in (("from_timestamp_ms", "to_timestamp_ms"), ("from_offset", "to_offset")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a >= b:
                raise ValueError(f"{lo} ({a}) must be < {hi} ({b}); the range is [from, to)")
        return self

    def target_for(self, topic: str) -> str:
        """The target topic of source topic `topic`."""
        return self.target_topic.replace(TOPIC_SLOT, topic)

    def applies_to(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics
