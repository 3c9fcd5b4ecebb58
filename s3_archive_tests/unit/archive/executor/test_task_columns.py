"""read_path librdkafka without a broker: the envelope of librdkafka's messages and the task batches made from it
equal a per-record reference of what Spark computes (driver/spark_job.py::write_frame). The messages are
confluent-kafka's `Message` interface filled in memory (the integration tests read real ones)."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from s3_archive.archive.executor.kafka_read import ENVELOPE_SCHEMA, _envelope
from s3_archive.archive.executor.task_columns import arrow_schema, record_bytes, task_batch, utf8_values
from s3_archive.archive.protocol import FormatPlan, WriteJob


class Msg:
    def __init__(self, offset, key, value, headers, ts, ts_type=1) -> None:
        self._o, self._k, self._v, self._h, self._t = offset, key, value, headers, (ts_type, ts)

    def offset(self):
        return self._o

    def key(self):
        return self._k

    def value(self):
        return self._v

    def headers(self):
        return self._h

    def timestamp(self):
        return self._t


blobs = st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=8).map(str.encode))
headers = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=5), blobs), max_size=3))
records = st.lists(st.tuples(blobs, blobs, headers, st.integers(-1, 2**41)), min_size=1, max_size=30)


@given(records)
@settings(max_examples=60, deadline=None)
def test_envelope_and_record_bytes_match_a_per_record_reference(recs):
    msgs = [Msg(100 + i, k, v, h or None, t) for i, (k, v, h, t) in enumerate(recs)]
    env = _envelope(msgs, "topic", 3)
    assert env.schema == ENVELOPE_SCHEMA
    rows = env.to_pylist()
    for m, row in zip(msgs, rows, strict=True):
        assert (row["key"], row["value"], row["offset"], row["partition"], row["topic"]) == \
            (m.key(), m.value(), m.offset(), 3, "topic")
        # Spark's source: no headers is null, not an empty list; CreateTime is type 0
        assert row["headers"] == ([{"key": k, "value": v} for k, v in m.headers()] if m.headers() else None)
        assert row["timestamp_type"] == 0
    assert env.column("timestamp").cast(pa.int64()).to_pylist() == [m.timestamp()[1] * 1000 for m in msgs]
    expected = [len(m.key() or b"") + len(m.value() or b"")
                + sum(len(k.encode()) + len(v or b"") for k, v in (m.headers() or [])) for m in msgs]
    assert record_bytes(env).tolist() == expected


def test_utf8_validity_is_per_value_and_nulls_decode():
    values = pa.array([b"ok", None, b"\xff\xfe", "ü".encode(), b"\xed\xa0\x80"], pa.binary())  # last: a surrogate
    good, text = utf8_values(values)
    assert good.to_pylist() == [True, True, False, True, False]
    assert text.to_pylist() == ["ok", None, None, "ü", None]


def _schema(*fields) -> str:
    return json.dumps({"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                                    for n, t in fields]})


def test_task_batch_of_parquet_with_utf8_decoding_and_dead_letters():
    raw = {"type": "struct", "fields": [{"name": f.name, "type": t, "nullable": True, "metadata": {}} for f, t in zip(
        ENVELOPE_SCHEMA, ["binary", "binary", {"type": "array", "containsNull": True, "elementType": {
            "type": "struct", "fields": [{"name": "key", "type": "string", "nullable": True, "metadata": {}},
                                         {"name": "value", "type": "binary", "nullable": True, "metadata": {}}]}},
            "string", "integer", "long", "timestamp", "integer"], strict=True)]}
    schema = _schema(("_partition", "integer"), ("_offset", "long"), ("_rec_bytes", "long"), ("_good", "boolean"),
                     ("_raw", raw), ("key", "binary"), ("value", "string"), ("timestamp", "timestamp"))
    job = WriteJob(topic="t", bucket="b", prefix="", fmt=FormatPlan("parquet", "snappy", ".parquet"), conn=None,
                   slices=(), decoding=True, dead_letter=True, task_schema=schema)
    env = _envelope([Msg(7, b"k", b"fine", [("h", b"1")], 5), Msg(8, None, b"\xff", None, -1)], "t", 0)
    b = task_batch(job, env)
    assert b.schema == arrow_schema(schema)
    assert b.column("_good").to_pylist() == [True, False]
    assert b.column("value").to_pylist() == ["fine", None]
    assert b.column("_raw").to_pylist()[0] is None
    assert b.column("_raw").to_pylist()[1]["value"] == b"\xff"
    assert b.column("_rec_bytes").to_pylist() == [1 + 4 + 1 + 1, 1]
