"""Which failures of a window no retry can fix (pure): the run stops retrying them at once, with one clear error,
instead of repeating the same refusal `retries.max` times and the offsets sensor requesting the window again.

Everything else (S3 5xx and throttling beyond botocore's own retries, a broker restart, a lost executor, a timeout)
is transient: the step is retried with backoff, then the sensor requests the window again (docs/sensors.md,
"Retries"). Errors raised in Spark's executors reach the driver as text (a Python worker's traceback inside a Java
exception), so S3 error codes and Kafka's refusals are also recognised by name in the message.
"""

from __future__ import annotations

import re

from botocore.exceptions import ClientError, NoCredentialsError

from s3_archive.config.archive import Retries
from s3_archive.io.s3 import REFUSALS, error_code
from s3_archive.model.errors import (
    ArchiveIntegrityError,
    DataLoss,
    InvalidConfig,
    InvalidManifest,
    KafkaRefused,
    MissingJars,
    S3Refused,
    UndecodableValue,
    UnknownTopic,
    UnplaceableRecord,
    WindowNotAvailable,
)
from s3_archive.model.windows import InvalidWindow

# Our own errors that say the data, the config or the cluster is not as the window needs: the same next time.
_PERMANENT = (ArchiveIntegrityError, DataLoss, InvalidConfig, InvalidManifest, InvalidWindow, KafkaRefused,
              MissingJars, S3Refused, UndecodableValue, UnknownTopic, UnplaceableRecord, WindowNotAvailable,
              NoCredentialsError)
# S3's answers that a retry gets again: io/s3.py's REFUSALS. Kafka's Java client (Spark's source) when the login
# or an ACL refuses us:
KAFKA_REFUSALS = ("SaslAuthenticationException", "SslAuthenticationException", "TopicAuthorizationException",
                  "ClusterAuthorizationException", "GroupAuthorizationException",
                  "KafkaRefused",  # the write tasks' own reads (executor/kafka_read.py): a refusal or a fatal error
                  "NativeReaderMissing")  # task_reader native where the tasks run without it: `make setup`
_IN_TEXT = re.compile(r"\((" + "|".join(REFUSALS) + r")\)|\b(" + "|".join(KAFKA_REFUSALS) + r")\b")


def permanent(e: BaseException) -> bool:
    """Whether retrying cannot help: our errors that say so, an S3 refusal, or either named in a Spark error."""
    if isinstance(e, _PERMANENT):
        return True
    if isinstance(e, ClientError):
        return error_code(e) in REFUSALS
    return _IN_TEXT.search(str(e)) is not None


def rerun_delay(retries: Retries, attempt: int) -> float:
    """Seconds after the failure of a window run's `attempt`th run (1: the first) before the offsets sensor requests
    its windows again: the step's backoff sequence, continued (backoff_seconds x 2^(max + attempt - 1)), at most a
    day."""
    return min(retries.backoff_seconds * 2 ** (retries.max + attempt - 1), 86_400.0)
