"""The errors users see, in one place. Each message names the bad value and what is allowed (or what to do);
none carries a credential. Stages raise them; the Dagster assets show a `UserError` as the run's failure without a
stack trace, because its message says everything.
"""

from __future__ import annotations


class UserError(Exception):
    """An error whose message says everything a user needs to act on (shown without a stack trace)."""


class ArchiveIntegrityError(UserError, RuntimeError):
    """A committed window's objects are missing or changed in S3."""


class InvalidManifest(UserError, ValueError):
    """A window's manifest that cannot be read: not JSON, an unknown manifest_version, or a field missing, unknown
    or of the wrong type (model/manifest.py)."""


class DataLoss(UserError, RuntimeError):
    """Kafka no longer has (part of) a window."""


class UndecodableValue(UserError, ValueError):
    """A record value does not decode as configured (value_decoding.on_error: fail)."""


class UnplaceableRecord(UserError, ValueError):
    """A record lacks a value the layout places it by (layout.on_missing: fail)."""


class RunEnded(UserError, RuntimeError):
    """The Dagster run a step belongs to has ended (its process died, or it was canceled) while the step went on."""


class WindowNotAvailable(UserError, ValueError):
    """A window reaches past what Kafka has written (or names a partition the topic lacks)."""


class S3Unavailable(UserError, RuntimeError):
    """The bucket is missing, unreachable, or the credentials are refused."""


class S3Refused(S3Unavailable):
    """The bucket is missing or S3 refuses the credentials: retrying does not help."""


class ConditionalWritesUnsupported(UserError, RuntimeError):
    """The S3 store ignores a conditional request the exactly-once commit relies on (io/store_probe.py)."""


class ObjectLockMissing(UserError, RuntimeError):
    """An archive with `retention_lock` on a bucket without S3 Object Lock enabled (io/store_probe.py)."""


class InvalidForeignObject(UserError, ValueError):
    """An object of a foreign archive whose name or contents do not fit its configured layout."""


class ForeignObjectsOverlap(InvalidForeignObject):
    """Objects of one Kafka partition whose records overlap or interleave: no order to restore them in (never
    skipped by `error_tolerance: skip`)."""


class ColdObjectsPending(UserError, RuntimeError):
    """Objects in GLACIER / DEEP_ARCHIVE are not readable yet; their restore was requested."""


class InvalidRestore(UserError, ValueError):
    """The restore request is wrong (bad topic, mapping, filter); the message names the bad value."""


class WindowNotArchived(UserError, RuntimeError):
    """A requested window has no manifest in S3."""


class RestoreFailed(UserError, RuntimeError):
    """Kafka refused the restore mid-way (delivery error, fenced, transaction aborted)."""


class DeadlineExceeded(UserError, RuntimeError):
    """A blocking call of a client library did not return within our deadline (io/deadline.py)."""


class KafkaUnavailable(UserError, RuntimeError):
    """The broker could not be reached or refused us."""


class KafkaRefused(KafkaUnavailable):
    """The broker refused the login or the TLS handshake: retrying does not help."""


class UnknownTopic(UserError, ValueError):
    """A configured topic does not exist on the cluster."""


class MissingJars(UserError, RuntimeError):
    """The JVM jars have not been fetched yet."""


class InvalidConfig(UserError, ValueError):
    """The configuration is wrong; the message names the key and the allowed values."""


class NativeReaderMissing(InvalidConfig):
    """`task_reader: native`, but the native reader (native/, built by `make setup`) is not installed where the
    write tasks run."""


class NativeProducerMissing(InvalidConfig):
    """`producer: native`, but native/'s producer (built by `make setup`) is not installed where the restore runs."""


class TopicStateUnreadable(UserError, RuntimeError):
    """The topic state file (the topics each topic_pattern knows) cannot be read or is not one."""


class TakeOverRefused(UserError, RuntimeError):
    """An archive cannot take over from a consumer group yet (the group still has members, or no offsets)."""


class UnsupportedConnectConfig(UserError, ValueError):
    """A Kafka Connect S3 sink config `s3-archive import-connect` cannot turn into an archive: the message names
    the option, its value (never a secret's) and what is allowed."""


class SchemaRegistryUnavailable(UserError, RuntimeError):
    """The Schema Registry could not be reached, or refused a request; the message names its URL (never the
    password)."""


class IncompatibleSchema(UserError, ValueError):
    """A window's writer schemas cannot be read as one schema (a field's type changed); the message names the
    topic, the offsets, both schema ids and the field."""


class AwsRequestFailed(UserError, RuntimeError):
    """S3 or Glue answered a request with an error; the message names the request, what it was for, and the error
    code S3 or Glue gave."""


class ErasureRefused(UserError, RuntimeError):
    """An erasure that cannot run on this archive (its retention lock, its format, a bad request); the message
    says why and what would allow it."""
