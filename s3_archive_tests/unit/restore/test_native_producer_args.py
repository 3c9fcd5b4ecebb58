"""native/'s producer refuses what it cannot send with one clear error naming the argument, before anything is
queued; a refused setting is named without its value; a queue that stays full (no broker takes records) fails after
`queue_full_s` as a retriable error. `producer: native` without the module is one error naming the setting and the
fix, and an unknown `producer` names the allowed ones. No broker here: the client points at a closed port."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest
import s3_archive_native as native
from confluent_kafka import KafkaError

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import InvalidRestore, NativeProducerMissing
from s3_archive.restore.group_run import open_producer
from s3_archive.restore.request import RestoreRequest

NOWHERE = "127.0.0.1:1"


@pytest.fixture
def producer():
    return native.Producer([("bootstrap.servers", NOWHERE), ("queue.buffering.max.messages", "2")], NOWHERE)


def test_a_setting_librdkafka_refuses_is_named_without_its_value():
    with pytest.raises(native.ProduceError) as e:
        native.Producer([("bootstrap.servers", NOWHERE), ("no.such.setting", "s3cret-value")], NOWHERE)
    assert '"no.such.setting"' in str(e.value) and "s3cret-value" not in str(e.value)


@pytest.mark.parametrize(("column", "bad", "text"), [
    ("values", pa.array([1, 2], pa.int64()), "values must be binary, large_binary, string or large_string; got Int64"),
    ("keys", pa.array([b"a"], pa.binary()), "keys has 1 entries and values 2"),
    ("headers", pa.array([1, 2], pa.int32()), "headers must be list<struct<key: string, value: binary>>"),
    ("timestamps", pa.array([1.0, 2.0]), "timestamps must be int64 (epoch milliseconds) or a timestamp"),
    ("partitions", pa.array([0, None], pa.int32()), "partitions must not hold nulls"),
])
def test_a_bad_column_is_one_error_naming_it(producer, column, bad, text):
    args = {"partitions": 0, "keys": pa.array([b"a", None], pa.binary()), "values": pa.array([b"x", b"y"]),
            "headers": None, "timestamps": None} | {column: bad}
    with pytest.raises(ValueError) as e:
        producer.produce_arrow("t", args["partitions"], args["keys"], args["values"], args["headers"],
                               args["timestamps"])
    assert text in str(e.value)
    assert producer.flush(5.0) == 0 and producer.take_deliveries() == (0, 0, None, [])  # nothing was queued


def test_a_list_instead_of_an_arrow_array_is_named(producer):
    with pytest.raises(TypeError, match="values must be an Arrow array .* got list"):
        producer.produce_arrow("t", 0, pa.array([b"a"]), [b"x"])


def test_the_offset_header_needs_its_offsets(producer):
    with pytest.raises(ValueError, match="offset_header and offsets go together"):
        producer.produce_arrow("t", 0, pa.array([b"a"]), pa.array([b"x"]), offset_header="src.offset")


def test_a_queue_that_stays_full_is_a_retriable_error_saying_how_far_it_got(producer):
    values = pa.array([b"x"] * 5)
    with pytest.raises(native.ProduceError) as e:
        producer.produce_arrow("t", 0, pa.array([None] * 5, pa.binary()), values, queue_full_s=0.3)
    assert e.value.code == KafkaError._QUEUE_FULL and e.value.retriable and not e.value.fatal
    assert "stayed full" in str(e.value) and "2 of 5 records" in str(e.value) and NOWHERE in str(e.value)
    producer.purge()
    assert producer.flush(5.0) == 0
    delivered, failed, (code, _), _ = producer.take_deliveries()  # the purged records' reports are failures
    assert (delivered, failed, code) == (0, 2, KafkaError._PURGE_QUEUE)


def test_the_native_producer_missing_is_one_error_naming_the_setting_and_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "s3_archive_native", None)  # as where the extension was never built
    with pytest.raises(NativeProducerMissing) as e:
        open_producer(KafkaResource(bootstrap_servers=NOWHERE), RestoreRequest("a", "b", producer="native"))
    text = str(e.value)
    assert "producer: native" in text and "`make setup`" in text and "producer: python" in text


def test_an_unknown_producer_names_the_allowed_ones():
    with pytest.raises(InvalidRestore, match="producer must be one of python, native; got 'rust'"):
        RestoreRequest("a", "b", producer="rust")


def test_a_batch_read_from_parquet_goes_to_the_producer_as_its_own_arrow_columns():
    import io

    import pyarrow.parquet as pq

    from s3_archive.restore.batch import Records
    from s3_archive.restore.native_producer import _column, _headers_type
    from s3_archive.restore.readers import parquet_batches

    element = pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
    buf = io.BytesIO()
    pq.write_table(pa.table({"key": pa.array([b"k", None], pa.binary()), "value": pa.array([b"v", b""], pa.binary()),
                             "headers": pa.array([[{"key": "h", "value": None}], []], pa.list_(element)),
                             "partition": pa.array([0, 0], pa.int32()), "offset": pa.array([7, 8], pa.int64()),
                             "timestamp": pa.array([1_000, 2_000], pa.timestamp("us", tz="UTC"))}), buf)
    buf.seek(0)
    (batch,) = parquet_batches(buf)
    types = {"keys": pa.binary(), "values": pa.binary(), "headers": _headers_type(), "timestamps": pa.int64(),
             "offsets": pa.int64()}
    assert all(_column(batch, name, t) is batch.arrow(name) for name, t in types.items())
    lists = Records([0], [7], [b"k"], [b"v"], [[("h", None)]], [1], [3])  # a row-wise reader's batch
    made = {name: _column(lists, name, t) for name, t in types.items()}
    assert made["headers"].type == _headers_type() and made["headers"].to_pylist() == [[{"key": "h", "value": None}]]
    assert made["timestamps"].to_pylist() == [1] and made["offsets"].to_pylist() == [7]
