"""The offset map's pieces in S3, beside the archive they were restored from, under the target cluster's id and
the restore's ledger id (keys/recovery_keys.py): written before their transaction commits, read back by the
recovery's group translation."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import KafkaException

from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.recovery_keys import offset_map_key, offset_map_prefix
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.offset_map import MapPiece, OffsetMapRecorder
from s3_archive.restore.producer import Producer
from s3_archive.restore.sources import parallel_map


@dataclass(frozen=True)
class OffsetMapStore:
    """Where one target cluster's restores keep their maps: the archive's bucket and prefix, the cluster's id."""

    s3: S3Client
    bucket: str
    prefix: str
    cluster_id: str

    def recorder(self, source_topic: str, ledger_id: str) -> OffsetMapSink:
        return OffsetMapSink(self, ledger_id, OffsetMapRecorder(source_topic))

    def put(self, ledger_id: str, piece: MapPiece) -> None:
        key = offset_map_key(self.prefix, self.cluster_id, ledger_id, piece.target_partition, piece.first_target)
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=piece.encode(), ContentType="application/json")

    def pieces(self, ledger_id: str) -> list[MapPiece]:
        keys = [o["Key"] for o in list_objects(self.s3, self.bucket,
                                               offset_map_prefix(self.prefix, self.cluster_id, ledger_id))]

        def read(key: str) -> MapPiece:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return MapPiece.decode(body, f"s3://{self.bucket}/{key}")

        return parallel_map(read, keys)


@dataclass
class OffsetMapSink:
    """A run's recorder and where its pieces go (restore/run.py calls `track`, then `commit` for each source
    partition of a transaction before it commits, `reset` when it starts over from the ledger)."""

    store: OffsetMapStore
    ledger_id: str
    recorder: OffsetMapRecorder

    def tracked(self, producer: Producer, rows: Iterator[tuple], tp: int, offsets: list[int],
                source_partition: int | None = None) -> Iterator[tuple]:
        """`rows` (target partition, key, value, headers, timestamp) but the first and the last, which are produced
        here with the recorder's delivery callbacks (the first before the others, the last after them)."""
        first, last = self.recorder.track(tp, offsets, source_partition)
        n, rows = len(offsets), iter(rows)
        _produce_one(producer, next(rows), first if n > 1 else _both(first, last))
        yield from itertools.islice(rows, max(0, n - 2))
        if n > 1:
            _produce_one(producer, next(rows), last)

    def commit(self, source_partition: int, covers: RangeSet) -> None:
        for piece in self.recorder.pieces(source_partition, covers):
            self.store.put(self.ledger_id, piece)

    def reset(self) -> None:
        self.recorder.reset()


def _produce_one(producer: Producer, row: tuple, on_delivery: Callable) -> None:
    tp, k, v, h, t = row
    try:
        producer.producer.produce(producer.request.target_topic, v, k, tp, on_delivery, None, t, h)
    except BufferError:  # the local queue is full: the slow path lets it drain
        producer.produce(tp, k, v, h, t, on_delivery)
    except KafkaException as e:
        raise producer.failed("producing to", e) from None


def _both(first: Callable, last: Callable) -> Callable:
    def both(err: object, msg: object) -> None:
        first(err, msg)
        last(err, msg)

    return both
