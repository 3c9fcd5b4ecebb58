"""The Lenses layout and Confluent's time/field partitioners and sidecar files: names planned as windows, objects
decoded (pure). The objects are written by s3_archive_tests/sink_writers.py from the sinks' documentation."""

from __future__ import annotations

import gzip
import re

import pytest
from pydantic import ValidationError

from s3_archive.config.foreign import ForeignSource
from s3_archive.model.errors import InvalidForeignObject
from s3_archive.restore.cold import ListedObject
from s3_archive.restore.foreign_records import (
    Decoder,
    decompress,
    numbered,
    sidecar_headers,
    sidecar_keys,
    sidecar_rows,
    with_sidecars,
)
from s3_archive.restore.foreign_sources import ForeignWindow, plan
from s3_archive.restore.request import ArchivedRecord
from s3_archive_tests import sink_writers as sink

TS = 1_700_000_000_000
RECS: list[sink.SinkRecord] = [  # offsets with a gap (compaction or a transaction marker)
    (10, b"\x00k", b"\xff\x00v", [("a", b"1"), ("b", b"")], TS),
    (11, None, b"text", [], TS + 1),
    (13, b"k3", None, [("n", None)], TS + 2),
]


def lenses(**kw) -> ForeignSource:
    return ForeignSource(**{"name": "l", "layout": "lenses", "bucket": "b", "topic": "orders", **kw})


def confluent(**kw) -> ForeignSource:
    return ForeignSource(**{"name": "c", "layout": "confluent", "bucket": "b", "topic": "orders", **kw})


def records(source: ForeignSource, fw: ForeignWindow, data: bytes, keys: bytes | None = None,
            headers: bytes | None = None, keys_fmt: str = "avro", headers_fmt: str = "avro") -> list[ArchivedRecord]:
    values = Decoder(source).decode(decompress(data, source.compression), "obj")
    k = sidecar_keys(sidecar_rows(keys, keys_fmt, b"\n"), keys_fmt, source.key_encoding) if keys else None
    h = sidecar_headers(sidecar_rows(headers, headers_fmt, b"\n")) if headers else None
    return list(numbered(with_sidecars(values, k, h, "obj"), fw.window, "obj", ArchivedRecord,
                         from_end=source.layout == "lenses", strict=fw.strict, spread=fw.spread))


def exact(recs=RECS, p: int = 0) -> list[ArchivedRecord]:
    return [ArchivedRecord(p, o, k, v, hs, ts) for o, k, v, hs, ts in recs]


# --------------------------------------------------------------------------------------------------------------
# Config


def test_lenses_defaults_follow_the_sink():
    s = lenses()
    assert (s.format, s.stores_envelope, s.key_prefix, s.has_timestamps) == ("json", False, "", False)
    assert lenses(prefix="backup", envelope=True).key_prefix == "backup/"
    assert lenses(envelope=True).has_timestamps


@pytest.mark.parametrize("kw, message", [
    ({"format": "jsonl"}, "not a Lenses S3 sink format (STOREAS); allowed: avro, parquet, json, csv, text, bytes"),
    ({"format": "csv", "envelope": True}, "stores its envelope in avro, parquet and json only"),
    ({"format": "avro", "compression": "gzip"}, "compresses only json objects"),
    ({"format": "json", "csv_header": True}, "csv_header applies to format 'csv' only"),
    ({"template": "{{topic}}"}, "template applies to layout 'aiven' only"),
    ({"fields": ["value"]}, "fields applies to layout 'aiven' only"),
    ({"partitioner": "time"}, "partitioner applies to layout 'confluent' only"),
    ({"format": "bytes", "line_separator": "|"}, "one object per record"),
    ({"key_suffix": "a/b"}, "must not contain '/'"),
])
def test_bad_lenses_sources_name_the_problem(kw, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        lenses(**kw)


def test_confluent_only_keys_are_refused_elsewhere():
    with pytest.raises(ValidationError, match=re.escape("csv_header applies to layout 'lenses' only")):
        confluent(format="json", csv_header=True)
    with pytest.raises(ValidationError, match=re.escape("key_encoding applies to layouts 'confluent' and 'lenses'")):
        ForeignSource(name="a", layout="aiven", bucket="b", topic="t", key_encoding="none")


# --------------------------------------------------------------------------------------------------------------
# Lenses names


def test_lenses_default_names_give_windows_from_the_last_offsets():
    s = lenses(format="avro", prefix="backup")
    keys = [sink.lenses_key("backup", "orders", 0, 13, "avro"), sink.lenses_key("backup", "orders", 0, 20, "avro"),
            sink.lenses_key("backup", "orders", 1, 4, "avro", offset_pad=0, partition_pad=3),
            # newer sinks add the first and last record's timestamps
            sink.lenses_key("backup", "orders", 1, 9, "avro", timestamps=(TS, TS + 5)),
            sink.lenses_key("backup", "other", 0, 1, "avro"), "backup/orders/0/000000000030.json",
            ".indexes/conn/orders/0/x", "backup/.temp-upload/orders/0/u/000000000031.avro"]
    assert keys[0] == "backup/orders/0/000000000013.avro"
    p = plan(s, [ListedObject(k, 1) for k in keys])
    assert [(fw.window.partition, fw.window.start, fw.window.end, fw.open_start, fw.open_end) for fw in p.windows] \
        == [(0, 0, 14, True, False), (0, 14, 21, False, False), (1, 0, 5, True, False), (1, 5, 10, False, False)]
    assert all(fw.strict and not fw.spread for fw in p.windows)
    assert sorted(p.ignored) == sorted(keys[4:])


def test_lenses_partitionby_names_and_key_suffix():
    s = lenses(format="json", key_suffix="-v1")
    keys = [sink.lenses_key("", "orders", 0, 3, "json", partition_by=[("region", "eu")], key_suffix="-v1"),
            sink.lenses_key("", "orders", 0, 7, "json", partition_by=[("region", "us"), ("day", "1")],
                            key_suffix="-v1"),
            sink.lenses_key("", "orders", 0, 9, "json", partition_by=[("x", "eu")], include_keys=False,
                            key_suffix="-v1"),
            sink.lenses_key("", "orders", 0, 11, "json", partition_by=[("region", "eu")])]  # no suffix: ignored
    assert keys[0] == "region=eu/orders(0_000000000003)-v1.json"
    p = plan(s, [ListedObject(k, 1) for k in keys])
    assert [(fw.window.start, fw.window.end, fw.spread) for fw in p.windows] == [(0, 4, True), (4, 8, True),
                                                                               (8, 10, True)]
    assert list(p.ignored) == [keys[3]]


def test_lenses_gzipped_json_is_named_gz():
    s = lenses(compression="gzip")
    p = plan(s, [ListedObject("orders/0/000000000002.gz", 1), ListedObject("orders/0/000000000004.json", 1)])
    assert [fw.obj.key for fw in p.windows] == ["orders/0/000000000002.gz"]


# --------------------------------------------------------------------------------------------------------------
# Lenses contents


def window(s: ForeignSource, last: int, prev: int | None = None, ext: str | None = None) -> ForeignWindow:
    keys = ([sink.lenses_key("", "orders", 0, prev, ext or s.format)] if prev is not None else []) + [
        sink.lenses_key("", "orders", 0, last, ext or s.format)]
    return plan(s, [ListedObject(k, 1) for k in keys]).windows[-1]


@pytest.mark.parametrize("fmt, write", [
    ("json", lambda: sink.lenses_json(RECS, "orders", 0, envelope=True)),
    ("avro", lambda: sink.lenses_avro(RECS, "orders", 0, envelope=True)),
    ("parquet", lambda: sink.lenses_parquet(RECS, "orders", 0, envelope=True)),
])
def test_lenses_envelopes_restore_every_part(fmt, write):
    s = lenses(format=fmt, envelope=True)
    assert records(s, window(s, 13), write()) == exact()


def test_lenses_gzipped_json_envelope():
    s = lenses(envelope=True, compression="gzip")
    data = gzip.compress(sink.lenses_json(RECS, "orders", 0, envelope=True))
    assert records(s, window(s, 13, ext="gz"), data) == exact()


@pytest.mark.parametrize("fmt, encoding, write", [
    ("json", "base64", lambda: sink.lenses_json(RECS, "orders", 0, envelope=False)),
    ("avro", "base64", lambda: sink.lenses_avro(RECS, "orders", 0, envelope=False)),
    ("parquet", "base64", lambda: sink.lenses_parquet(RECS, "orders", 0, envelope=False)),
])
def test_lenses_values_alone_are_numbered_back_from_the_last_offset(fmt, encoding, write):
    s = lenses(format=fmt, value_encoding=encoding)
    got = records(s, window(s, 13, prev=9), write())
    # no stored offsets: the last record is the name's offset, the ones before it follow without a gap
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in got] == [
        (11, None, b"\xff\x00v", [], -1), (12, None, b"text", [], -1), (13, None, None, [], -1)]


def test_lenses_json_values_as_text_or_structures():
    s = lenses(value_encoding="none")
    recs = [(0, None, b'{"a":[1,2]}', [], TS), (1, None, "ü".encode(), [], TS), (2, None, None, [], TS)]
    data = b'{"a": [1, 2]}\n"\\u00fc"\nnull\n'
    assert [r.value for r in records(s, window(s, 2), data)] == [r[2] for r in recs]


def test_lenses_text_csv_and_bytes():
    s = lenses(format="text")
    assert [r.value for r in records(s, window(s, 5), sink.lenses_text(["a b", "", "ü"]))] == [b"a b", b"", "ü".encode()]
    rows = [{"id": "1", "note": 'say "hi"\nbye'}, {"id": "2", "note": ""}]
    s = lenses(format="csv", csv_header=True)
    got = records(s, window(s, 5), sink.lenses_csv(rows, header=True))
    assert [(r.offset, r.value) for r in got] == [(4, b'"1","say ""hi""\nbye"'), (5, b'"2",""')]
    s = lenses(format="csv")
    assert len(records(s, window(s, 5), sink.lenses_csv(rows, header=False))) == 2
    s = lenses(format="bytes")
    assert [(r.offset, r.value) for r in records(s, window(s, 7, prev=3), b"\x00\n\xff")] == [(7, b"\x00\n\xff")]


def test_lenses_object_with_more_records_than_its_name_leaves_is_refused():
    s = lenses(format="avro")
    with pytest.raises(InvalidForeignObject, match=re.escape("holds 3 records, more than the offsets [12, 14)")):
        records(s, window(s, 13, prev=11), sink.lenses_avro(RECS, "orders", 0, envelope=False))
    s = lenses(format="avro", envelope=True)  # stored offsets past the name's
    with pytest.raises(InvalidForeignObject, match="record 2 has offset 13, at or past 13"):
        records(s, window(s, 12), sink.lenses_avro(RECS, "orders", 0, envelope=True))


def test_interleaved_partitionby_objects_are_refused_naming_why():
    s = lenses(format="avro")
    keys = [sink.lenses_key("", "orders", 0, 12, "avro", partition_by=[("r", "eu")]),
            sink.lenses_key("", "orders", 0, 13, "avro", partition_by=[("r", "us")])]
    second = plan(s, [ListedObject(k, 1) for k in keys]).windows[1]
    data = sink.lenses_avro([RECS[1], RECS[2]], "orders", 0, envelope=False)  # offsets 11, 13: interleaved with 12
    with pytest.raises(InvalidForeignObject, match="spread over several directories .* interleave"):
        records(s, second, data)


# --------------------------------------------------------------------------------------------------------------
# Confluent partitioners and sidecars


def test_confluent_time_and_field_partitioned_names():
    s = confluent(format="avro", partitioner="time")
    keys = [sink.confluent_key("topics", "orders", "year=2024/month=01/day=15/hour=10", 0, 0, ".avro"),
            sink.confluent_key("topics", "orders", "year=2024/month=01/day=15/hour=11", 0, 5, ".avro"),
            sink.confluent_key("topics", "orders", "year=2024/month=01/day=15/hour=11", 0, 8, ".avro"),
            sink.confluent_key("topics", "orders", "year=2024/month=01/day=15/hour=11", 0, 8, ".avro", ".keys"),
            sink.confluent_key("topics", "orders", "year=2024/month=01/day=15/hour=10", 0, 0, ".json", ".headers")]
    assert keys[0] == "topics/orders/year=2024/month=01/day=15/hour=10/orders+0+0000000000.avro"
    p = plan(s, [ListedObject(k, 1) for k in keys])
    assert [(fw.window.start, fw.window.end, fw.strict, fw.spread, fw.keys is not None, fw.headers is not None)
            for fw in p.windows] == [(0, 5, True, True, False, True), (5, 8, False, True, False, False),
                                     (8, 2**63 - 1, False, True, True, False)]
    assert p.windows[0].headers.fmt == "json" and not p.ignored
    # the default partitioner's directory must be partition=<p>
    assert plan(confluent(format="avro"), [ListedObject(keys[0], 1)]).windows == []


def test_confluent_interleaved_field_partitions_are_refused():
    s = confluent(format="avro", partitioner="field")
    keys = [sink.confluent_key("topics", "orders", "region=eu", 0, 0, ".avro"),
            sink.confluent_key("topics", "orders", "region=us", 0, 1, ".avro")]
    first = plan(s, [ListedObject(k, 1) for k in keys]).windows[0]
    with pytest.raises(InvalidForeignObject, match="at or past 1, where the partition's next object starts"):
        records(s, first, sink.confluent_avro([b"a", b"c"]))  # offsets 0 and 2 here, 1 in region=us
    assert [r.offset for r in records(s, first, sink.confluent_avro([b"a"]))] == [0]


@pytest.mark.parametrize("keys_fmt, keys, headers_fmt, headers", [
    ("avro", lambda: sink.confluent_avro([r[1] for r in RECS]), "avro",
     lambda: sink.confluent_headers_avro([r[3] for r in RECS])),
    ("json", lambda: sink.confluent_json([r[1] for r in RECS]), "json",
     lambda: sink.confluent_headers_json([r[3] for r in RECS])),
    ("parquet", lambda: sink.confluent_parquet("key", [r[1] for r in RECS], sink.pa.binary()), "parquet",
     lambda: sink.confluent_headers_parquet([r[3] for r in RECS])),
])
def test_confluent_keys_and_headers_files_join_their_records(keys_fmt, keys, headers_fmt, headers):
    s = confluent(format="avro")
    fw = plan(s, [ListedObject(sink.confluent_key("topics", "orders", "partition=0", 0, 10, ".avro"), 1)]).windows[0]
    got = records(s, fw, sink.confluent_avro([r[2] for r in RECS]), keys(), headers(), keys_fmt, headers_fmt)
    # no offsets in the objects: derived from the start (the gap at 12 is not seen); headers in order, duplicates kept
    assert got == [ArchivedRecord(0, 10 + i, k, v, hs, -1) for i, (_, k, v, hs, _) in enumerate(RECS)]


def test_confluent_sidecar_with_another_count_is_refused():
    s = confluent(format="avro")
    fw = plan(s, [ListedObject(sink.confluent_key("topics", "orders", "partition=0", 0, 0, ".avro"), 1)]).windows[0]
    with pytest.raises(InvalidForeignObject, match="sibling holds fewer records"):
        records(s, fw, sink.confluent_avro([b"a", b"b"]), sink.confluent_avro([b"k"]))
    with pytest.raises(InvalidForeignObject, match="headers sibling holds more records"):
        records(s, fw, sink.confluent_avro([b"a"]), None, sink.confluent_headers_avro([[], []]))


def test_confluent_json_strings_follow_the_converter():
    s = confluent(format="json")
    fw = plan(s, [ListedObject("topics/orders/partition=0/orders+0+0000000000.json", 1)]).windows[0]
    assert [r.value for r in records(s, fw, sink.confluent_json([b"\x00\xff", None, {"a": 1}]))] == [
        b"\x00\xff", None, b'{"a": 1}']
    s = confluent(format="json", value_encoding="none")
    assert [r.value for r in records(s, fw, sink.confluent_json(["ü", "x"]))] == ["ü".encode(), b"x"]
