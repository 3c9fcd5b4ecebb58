"""The errors users see, in one place. Each message names the bad value and what is allowed (or what to do);
none carries a credential. Stages raise them; the Dagster assets turn them into a run failure without a stack
trace where the message says everything.
"""

from __future__ import annotations


class ArchiveIntegrityError(RuntimeError):
    """A committed window's objects are missing or changed in S3."""


class InvalidManifest(ValueError):
    """A window's manifest that cannot be read: not JSON, an unknown manifest_version, or a field missing, unknown
    or of the wrong type (model/manifest.py)."""


class DataLoss(RuntimeError):
    """Kafka no longer has (part of) a window."""


class WindowNotAvailable(ValueError):
    """A window reaches past what Kafka has written (or names a partition the topic lacks)."""


class S3Unavailable(RuntimeError):
    """The bucket is missing, unreachable, or the credentials are refused."""


class InvalidForeignObject(ValueError):
    """An object of a foreign archive whose name or contents do not fit its configured layout."""


class ColdObjectsPending(RuntimeError):
    """Objects in GLACIER / DEEP_ARCHIVE are not readable yet; their restore was requested."""


class InvalidRestore(ValueError):
    """The restore request is wrong (bad topic, mapping, filter); the message names the bad value."""


class WindowNotArchived(RuntimeError):
    """A requested window has no manifest in S3."""


class RestoreFailed(RuntimeError):
    """Kafka refused the restore mid-way (delivery error, fenced, transaction aborted)."""


class KafkaUnavailable(RuntimeError):
    """The broker could not be reached or refused us."""


class UnknownTopic(ValueError):
    """A configured topic does not exist on the cluster."""


class MissingJars(RuntimeError):
    """The JVM jars have not been fetched yet."""


class InvalidConfig(ValueError):
    """The configuration is wrong; the message names the key and the allowed values."""


class TopicStateUnreadable(RuntimeError):
    """The topic state file (the topics each topic_pattern knows) cannot be read or is not one."""
