"""Launch-time choices of a restore (the run config a user fills in the launchpad)."""

import dagster as dg
from pydantic import Field

from s3_archive.model.errors import InvalidRestore
from s3_archive.restore.cold import ColdOptions
from s3_archive.restore.request import (
    DEFAULT_BROKER_OUTAGE_SECONDS,
    DEFAULT_PRODUCER,
    DEFAULT_PRODUCERS,
    DEFAULT_TRANSACTION_RECORDS,
    Filters,
    RestoreRequest,
)
from s3_archive.restore.routing import PartitionMapping


class RestoreConfig(dg.Config):
    """Launch-time choices of a restore."""

    target_topic: str = Field(description="existing topic to produce into (a restore never creates topics)")
    allow_source_topic: bool = Field(default=False, description="allow target_topic to be the archived topic "
                                                                "itself (re-appends every record)")
    partition_mapping: str = Field(default="same", description="same | murmur2 (Kafka's default partitioner on "
                                                               "the key; null keys stay on source % n) | map")
    partition_map: dict[str, int] = Field(default_factory=dict, description="with partition_mapping: map, "
                                                                            "source partition -> target partition")
    provenance_headers: bool = Field(default=False, description="append s3archive.source.topic/partition/offset "
                                                                "headers to every restored record")
    from_timestamp_ms: int | None = Field(default=None, description="only records with timestamp >= this")
    to_timestamp_ms: int | None = Field(default=None, description="only records with timestamp < this")
    from_offset: int | None = Field(default=None, description="only source offsets >= this")
    to_offset: int | None = Field(default=None, description="only source offsets < this")
    dry_run: bool = Field(default=False, description="count records and bytes per target partition; produce "
                                                     "nothing")
    transaction_records: int = Field(default=DEFAULT_TRANSACTION_RECORDS,
                                     description="records per Kafka transaction (at most; also committed every "
                                                 "20 s and at the end of the run)")
    broker_outage_seconds: float = Field(
        default=DEFAULT_BROKER_OUTAGE_SECONDS, description="when the target cluster becomes unreachable (a broker "
        "restart), re-initialise the producer and resume from the ledger for up to this long; then fail")
    producers: int = Field(default=DEFAULT_PRODUCERS, description="transactional producers side by side (1 to 16), "
                           "each producing the source partitions of its share of the target's partitions, in order")
    producer: str = Field(default=DEFAULT_PRODUCER, description="native (native/'s producer of Arrow batches, built "
                          "by make setup) | python (confluent-kafka, a call per record)")
    wait_for_cold_seconds: int = Field(
        default=0, ge=0, description="objects in GLACIER / DEEP_ARCHIVE: 0 = request RestoreObject, then fail "
                                     "with the count still pending; > 0 = request, then poll until they are "
                                     "readable, at most this long")
    cold_restore_days: int | None = Field(default=None, ge=1, description="RestoreObject Days (default 7; a "
                                                                          "foreign source's own setting)")
    cold_restore_tier: str | None = Field(default=None, description="RestoreObject tier: Standard | Bulk | "
                                                                    "Expedited (default Standard; a foreign "
                                                                    "source's own setting)")

    def request(self, source_topic: str) -> RestoreRequest:
        return RestoreRequest(
            source_topic=source_topic,
            target_topic=self.target_topic,
            mapping=PartitionMapping.parse(self.partition_mapping, self.partition_map),
            filters=Filters(self.from_timestamp_ms, self.to_timestamp_ms, self.from_offset, self.to_offset),
            provenance_headers=self.provenance_headers,
            dry_run=self.dry_run,
            allow_source_topic=self.allow_source_topic,
            transaction_records=self.transaction_records,
            broker_outage_seconds=self.broker_outage_seconds,
            producers=self.producers,
            producer=self.producer,
        )

    def cold(self, days: int = 7, tier: str = "Standard") -> ColdOptions:
        """The cold-storage options; `days` and `tier` where the launch gives none (a foreign source's own)."""
        try:
            return ColdOptions(self.wait_for_cold_seconds, self.cold_restore_days or days,
                               self.cold_restore_tier or tier)
        except ValueError as e:
            raise InvalidRestore(str(e)) from None


class ForeignRestoreConfig(RestoreConfig):
    """RestoreConfig (with its cold-storage keys; cold_restore_days/tier default to the source's settings)."""
