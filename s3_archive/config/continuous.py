"""An archive's continuous mode (`continuous:` of an archive): one long-lived run per topic cuts and archives its
windows in a loop instead of the offsets sensor's runs (docs/sensors.md, "Continuous archive")."""

from __future__ import annotations

from pydantic import Field

from s3_archive.model.base import StrictModel


class ContinuousOptions(StrictModel):
    """How the long-lived run of each topic loops: it reads Kafka's offsets, cuts windows by the archive's flush
    rules, writes and commits them, and reads the offsets again at once; when it found nothing to cut it waits
    `poll_seconds` first."""

    poll_seconds: float = Field(default=1.0, ge=0.1, le=60, description="the wait between two reads of Kafka's "
                                                                        "offsets that found no window to cut")
