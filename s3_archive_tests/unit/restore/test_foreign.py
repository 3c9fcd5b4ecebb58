"""Archives written by Kafka Connect S3 sinks: source config, planning windows, decoding objects (pure).

The sinks' name templates are the key engine's: unit/keys/test_foreign.py."""

from __future__ import annotations

import base64
import gzip
import io
import json
import re
import struct
from datetime import UTC, datetime

import cramjam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from s3_archive.config.foreign import ForeignSource
from s3_archive.keys.foreign_keys import aiven_render
from s3_archive.model.errors import InvalidForeignObject
from s3_archive.model.windows import MAX_OFFSET
from s3_archive.restore.cold import ListedObject, cold_state
from s3_archive.restore.foreign_records import Decoder, decompress, numbered
from s3_archive.restore.foreign_sources import plan, shown_ignored
from s3_archive.restore.request import ArchivedRecord

# --------------------------------------------------------------------------------------------------------------
# Config


def src(**kw) -> ForeignSource:
    return ForeignSource(**{"name": "s", "layout": "aiven", "bucket": "b", "topic": "orders", **kw})


@pytest.mark.parametrize("kw, message", [
    ({"template": "{{partition}}{{start_offset}}"}, "ambiguous"),
    ({"template": "{{topic}}/{{key}}"}, "needs {{partition}} and {{start_offset}}"),
    ({"template": "{{topic}}/{{partition}}/{{start_offset}}/{{key}}"}, "groups records by key"),
    ({"fields": ["key", "offset"]}, "have no value"),
    ({"fields": ["value", "value"]}, "twice"),
    ({"format": "csv", "value_encoding": "none", "fields": ["value", "key"]}, "value must be the last field"),
    ({"layout": "confluent", "format": "csv"}, "not a Confluent S3 sink format"),
    ({"layout": "confluent"}, "layout 'confluent' needs format"),
    ({"layout": "confluent", "format": "json", "template": "{{topic}}"}, "template applies to layout 'aiven' only"),
    ({"layout": "confluent", "format": "avro", "compression": "gzip"}, "compresses only json and bytes"),
    ({"envelope": False, "fields": ["key", "value"]}, "exactly one field"),
    ({"name": "Bad"}, "must match"),
])
def test_bad_sources_are_refused_with_the_reason(kw, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        src(**kw)


# --------------------------------------------------------------------------------------------------------------
# Planning


def test_plan_orders_windows_and_leaves_the_last_one_open():
    s = src(prefix="sink/", compression="gzip")
    listing = [ListedObject(k, 10) for k in [
        "sink/orders-1-0.gz", "sink/orders-0-100.gz", "sink/orders-0-0.gz", "sink/orders-0-250.gz",
        "sink/other-0-0.gz",  # another topic
        "sink/orders-0-300",  # no compression suffix
        "sink/orders-x-1.gz", "elsewhere/orders-0-0.gz",
    ]]
    p = plan(s, listing)
    assert [(fw.window.partition, fw.window.start, fw.window.end, fw.open_end) for fw in p.windows] == [
        (0, 0, 100, False), (0, 100, 250, False), (0, 250, MAX_OFFSET, True), (1, 0, MAX_OFFSET, True)]
    assert sorted(p.ignored) == ["elsewhere/orders-0-0.gz", "sink/orders-0-300", "sink/orders-x-1.gz",
                                 "sink/other-0-0.gz"]


def test_plan_refuses_two_objects_for_one_start_offset():
    s = src(template="{{topic}}-{{partition}}-{{start_offset}}-{{timestamp:unit=HH}}")
    with pytest.raises(InvalidForeignObject, match="both claim partition 0 start offset 5"):
        plan(s, [ListedObject("orders-0-5-01", 1), ListedObject("orders-0-5-02", 1)])


def test_confluent_plan_pairs_keys_and_headers_files():
    s = ForeignSource(name="c", layout="confluent", bucket="b", topic="orders", format="avro")
    base = "topics/orders/partition=2/orders+2+"
    listing = [ListedObject(base + k, 1) for k in [
        "0000000000.avro", "0000000000.keys.avro", "0000000000.headers.avro", "0000000010.avro",
        "0000000020.json"]] + [ListedObject("topics/orders/partition=3/orders+2+0000000000.avro", 1),
                               ListedObject("topics/orders/year=2024/orders+0+0000000000.avro", 1)]
    p = plan(s, listing)
    assert [(fw.window.start, fw.window.end, fw.keys is not None, fw.headers is not None) for fw in p.windows] == [
        (0, 10, True, True), (10, MAX_OFFSET, False, False)]
    # a .json values object (the source is avro), a partition directory that is not the name's, another
    # partitioner's directory
    assert len(p.ignored) == 3


@pytest.mark.parametrize("source, prefix, names", [
    (src(), "", ["orders-0-9223372036854775807", "orders-0-99999999999999999999", "orders-2147483648-0",
                 "orders-100000-0"]),
    (ForeignSource(name="c", layout="confluent", bucket="b", topic="orders", format="avro"), "topics/orders/",
     ["partition=0/orders+0+9223372036854775808.avro", "partition=2147483648/orders+2147483648+0.avro",
      "partition=100000/orders+100000+0.avro"]),
])
def test_names_with_an_offset_or_partition_out_of_range_are_ignored_with_the_reason(source, prefix, names):
    good = "orders-0-5" if source.layout == "aiven" else "partition=0/orders+0+5.avro"
    stray = ["x y", "orders-0-x", "partition=0/orders+0+5.avro.tmp", "\u00fcber;`drop`"]
    p = plan(source, [ListedObject(prefix + k, 1) for k in [*names, good, *stray]])
    assert [(fw.window.partition, fw.window.start) for fw in p.windows] == [(0, 5)]  # the others still restore
    assert set(p.out_of_range()) == {prefix + k for k in names}
    assert set(p.ignored) == {prefix + k for k in [*names, *stray]}
    why = p.out_of_range()
    assert why[prefix + names[0]].startswith("out of range: start offset 922337203685477580")
    # 2^63-1 is a Kafka offset but no record's (the planner says so); 2^63 is none (the parser says so)
    assert ("beyond 9223372036854775806, the largest offset of a Kafka record" if names[0].endswith("807") else
            "beyond 9223372036854775807, Kafka's largest offset") in why[prefix + names[0]]
    # Beyond Kafka's ranges: the parser's own answer; beyond a restore window's partitions: the planner's.
    assert "partition 2147483648 is beyond 2147483647, Kafka's largest partition" in why[
        next(prefix + k for k in names if "2147483648" in k)]
    assert "partition 100000 is beyond 99999" in why[next(prefix + k for k in names if "100000" in k)]
    # The user is shown the out-of-range names first.
    assert list(shown_ignored(p))[:len(names)] == sorted(why, key=list(p.ignored).index)


@pytest.mark.parametrize("storage, header, state", [
    ("STANDARD", None, "ready"), ("GLACIER_IR", None, "ready"), ("GLACIER", None, "request"),
    ("DEEP_ARCHIVE", 'ongoing-request="true"', "pending"),
    ("GLACIER", 'ongoing-request="false", expiry-date="Fri, 21 Dec 2012 00:00:00 GMT"', "ready"),
])
def test_cold_state(storage, header, state):
    assert cold_state(storage, header) == state


# --------------------------------------------------------------------------------------------------------------
# Decoding: objects written here in the sinks' documented formats

RECS = [  # offset, key, value, headers, timestamp
    (5, b"\x00k1", b"\xffv1", [("h", b"1"), ("h", b"2")], 1_700_000_000_123),
    (7, None, b"", [], 1_700_000_000_124),
    (8, b"k3", None, [("e", b"")], 1_700_000_000_125),
]


def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def aiven_csv(fields: list[str]) -> bytes:
    lines = []
    for off, k, v, hs, ts in RECS:
        col = {"key": b64(k) or "", "value": b64(v) or "", "offset": str(off), "timestamp": str(ts),
               "headers": "".join(f"{b64(n.encode())}:{b64(x)};" for n, x in hs)}
        lines.append(",".join(col[f] for f in fields))
    return "\n".join(lines).encode()  # no newline after the last record, like the sink


def aiven_json_rows() -> list[dict]:
    return [{"key": b64(k), "value": b64(v), "offset": off,
             "timestamp": datetime.fromtimestamp(ts / 1000, UTC).isoformat(timespec="milliseconds").replace(
                 "+00:00", "Z"), "headers": [{"key": n, "value": b64(x)} for n, x in hs]}
            for off, k, v, hs, ts in RECS]


def decode(source: ForeignSource, data: bytes, start: int = 5) -> list[ArchivedRecord]:
    fw = plan(source, [ListedObject(source.key_prefix + aiven_render(source.key_template, "orders", 0, start)
                                    + {"none": "", "gzip": ".gz", "snappy": ".snappy", "zstd": ".zst"}[
                                        source.compression], len(data))]).windows[0] \
        if source.layout == "aiven" else None
    return list(numbered(Decoder(source).decode(decompress(data, source.compression), "obj"), fw.window, "obj",
                         ArchivedRecord))


FULL = ["key", "value", "offset", "timestamp", "headers"]


def expected(csv: bool = False) -> list[ArchivedRecord]:
    # csv writes a null and an empty value alike (nothing): both come back null
    return [ArchivedRecord(0, off, k, (v or None) if csv else v, hs, ts) for off, k, v, hs, ts in RECS]


def xerial_snappy(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


@pytest.mark.parametrize("compression, pack", [
    ("none", lambda b: b), ("gzip", gzip.compress), ("zstd", lambda b: bytes(cramjam.zstd.compress(b))),
    ("snappy", xerial_snappy), ("snappy", lambda b: bytes(cramjam.snappy.compress(b))),
])
def test_aiven_csv_all_fields_and_every_compression(compression, pack):
    s = src(format="csv", fields=["timestamp", "key", "headers", "offset", "value"], compression=compression)
    assert decode(s, pack(aiven_csv(s.fields))) == expected(csv=True)


def test_aiven_csv_value_only_derives_offsets_and_maps_empty_to_null():
    s = src(format="csv", fields=["value"])
    got = decode(s, aiven_csv(["value"]))
    assert [(r.offset, r.value, r.key, r.timestamp_ms) for r in got] == [(5, b"\xffv1", None, -1), (6, None, None, -1),
                                                                         (7, None, None, -1)]


def test_aiven_jsonl_and_json():
    rows = aiven_json_rows()
    s = src(format="jsonl", fields=FULL)
    assert decode(s, "\n".join(json.dumps(r) for r in rows).encode() + b"\n") == expected()
    s = src(format="json", fields=FULL)
    assert decode(s, ("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]").encode()) == expected()


def test_aiven_jsonl_value_not_base64():
    s = src(format="jsonl", fields=["value", "offset"], value_encoding="none")
    data = b'{"value": {"a": [1, 2]}, "offset": 3}\n{"value": "text", "offset": 4}\n'
    assert [(r.offset, r.value) for r in decode(s, data, start=3)] == [(3, b'{"a":[1,2]}'), (4, b"text")]


def test_aiven_avro_and_parquet_envelopes():
    schema = {"type": "record", "name": "connector_records", "fields": [
        {"name": "key", "type": ["null", "bytes"]}, {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long"},
        {"name": "headers", "type": {"type": "map", "values": "bytes"}},
        {"name": "value", "type": ["null", "bytes"]}]}
    rows = [{"key": k, "offset": off, "timestamp": ts, "headers": dict(hs), "value": v} for off, k, v, hs, ts in RECS]
    buf = io.BytesIO()
    fastavro.writer(buf, schema, rows)
    # An avro/parquet map keeps one value per header name: duplicates collapse (documented).
    want = [r._replace(headers=list(dict(r.headers).items())) for r in expected()]
    assert decode(src(format="avro", fields=FULL), buf.getvalue()) == want
    table = pa.table({"key": [r["key"] for r in rows], "offset": [r["offset"] for r in rows],
                      "timestamp": [r["timestamp"] for r in rows],
                      "headers": pa.array([list(r["headers"].items()) for r in rows],
                                          pa.map_(pa.string(), pa.binary())),
                      "value": [r["value"] for r in rows]})
    out = io.BytesIO()
    pq.write_table(table, out)
    assert decode(src(format="parquet", fields=FULL), out.getvalue()) == want


def test_aiven_bytes_object_is_one_value():
    assert [(r.offset, r.value) for r in decode(src(format="bytes"), b"a\nb")] == [(5, b"a\nb")]


def test_offsets_must_increase_inside_an_object():
    s = src(format="csv", fields=["value", "offset"])
    with pytest.raises(InvalidForeignObject, match="offset 6, not above 7"):
        decode(s, b"YQ==,7\nYg==,6\n")
    with pytest.raises(InvalidForeignObject, match="offset 4, not above 4"):
        decode(s, b"YQ==,4\n", start=5)


def test_garbage_is_reported_with_the_object():
    with pytest.raises(InvalidForeignObject, match="obj is not a aiven jsonl object"):
        decode(src(format="jsonl", fields=FULL), b"{not json\n")
    with pytest.raises(InvalidForeignObject, match="csv line has 1 fields, expected 2"):
        decode(src(format="csv", fields=["key", "value"]), b"YQ==\n")


def test_confluent_json_and_bytes_values():
    fw = plan(ForeignSource(name="c", layout="confluent", bucket="b", topic="orders", format="json"),
              [ListedObject("topics/orders/partition=0/orders+0+0000000010.json", 1)]).windows[0]
    s = ForeignSource(name="c", layout="confluent", bucket="b", topic="orders", format="json", value_encoding="none")
    got = list(numbered(Decoder(s).decode(b'{"a": 1}\n"x"\n', "o"), fw.window, "o", ArchivedRecord))
    assert [(r.offset, r.value, r.timestamp_ms) for r in got] == [(10, b'{"a": 1}', -1), (11, b"x", -1)]
    s = ForeignSource(name="c", layout="confluent", bucket="b", topic="orders", format="bytes", line_separator="|")
    assert [v for _, _, v, _, _ in Decoder(s).decode(b"a|b||c|", "o")] == [b"a", b"b", b"", b"c"]


def test_error_tolerance_skips_what_does_not_read_never_what_s3_cannot_serve():
    from botocore.exceptions import ReadTimeoutError

    from s3_archive.restore.foreign_sources import window_source

    s = src(prefix="sink/", error_tolerance="skip")
    (fw,) = plan(s, [ListedObject("sink/orders-0-0", 9)]).windows

    class S3:
        def __init__(self, body: bytes | None) -> None:
            self.body = body

        def get_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 (boto3's names)
            if self.body is None:
                raise ReadTimeoutError(endpoint_url="http://s3")
            return {"Body": io.BytesIO(self.body)}

    skipped: dict[str, str] = {}
    assert [b for b in window_source(S3(b"not json\n"), s, fw, skipped).batches()] == []
    assert list(skipped) == ["sink/orders-0-0"]  # an object that does not read: skipped, listed
    skipped.clear()
    with pytest.raises(ReadTimeoutError):  # S3 timed out: the run fails, the object is not marked restored
        list(window_source(S3(None), s, fw, skipped).batches())
    assert skipped == {}
