"""The run's side of the offset map without a broker: which records get the delivery callbacks, in which order
they reach the producer, and the piece a transaction writes (a client that assigns offsets as a broker would)."""

from __future__ import annotations

from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.offset_map import MapPiece, OffsetMapRecorder, Run
from s3_archive.restore.offset_map_store import OffsetMapSink


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class _Client:
    """Appends to one partition's log; delivery callbacks run at `flush`, as librdkafka's do."""

    def __init__(self, start: int) -> None:
        self.next, self.log, self.pending = start, [], []

    def produce(self, topic, value, key, partition, on_delivery, callback, timestamp, headers) -> None:
        self.log.append(value)
        if on_delivery is not None:
            self.pending.append((on_delivery, self.next))
        self.next += 1

    def flush(self) -> None:
        for cb, offset in self.pending:
            cb(None, _Msg(offset))
        self.pending = []


class _Producer:
    def __init__(self, start: int) -> None:
        self.producer = _Client(start)
        self.request = type("R", (), {"target_topic": "t"})()


class _Store:
    def __init__(self) -> None:
        self.pieces: list[MapPiece] = []

    def put(self, ledger_id: str, piece: MapPiece) -> None:
        self.pieces.append(piece)


def _send(sink: OffsetMapSink, producer: _Producer, offsets: list[int]) -> None:
    rows = [(0, None, f"v{o}".encode(), [], 1) for o in offsets]
    for tp, k, v, h, t in sink.tracked(producer, iter(rows), 0, offsets):  # what run.py's loop produces itself
        producer.producer.produce("t", v, k, tp, None, None, t, h)


def test_batches_reach_the_producer_in_order_and_their_piece_has_the_runs() -> None:
    store, producer = _Store(), _Producer(start=40)
    sink = OffsetMapSink(store, "ledger", OffsetMapRecorder("src"))  # type: ignore[arg-type]
    _send(sink, producer, [3, 4, 5, 9])
    _send(sink, producer, [10])  # one record: first and last at once
    _send(sink, producer, [12, 13])
    assert producer.producer.log == [f"v{o}".encode() for o in (3, 4, 5, 9, 10, 12, 13)]
    producer.producer.flush()
    sink.commit(0, RangeSet([[3, 14]]))
    (piece,) = store.pieces
    assert piece.runs == [Run(3, 40, 3), Run(9, 43, 2), Run(12, 45, 2)]
    assert piece.covers == [[3, 14]] and piece.exact
