"""The task's vectorised pieces (executor/task_lines.py, task_buckets.py) against per-record references: base64 as
Python's, JSON strings as Jackson escapes them, each record's bucket as keys/buckets.py::record_bucket; lines
rendered with their end make the same objects as lines the encoder joins. Whole lines and buckets are compared with
Spark's own in integration/archive/test_task_columns_vs_spark.py."""

from __future__ import annotations

import base64 as b64
import io
import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from s3_archive.archive.executor.encoders import LinesEncoder, line_end
from s3_archive.archive.executor.kafka_read import ENVELOPE_SCHEMA
from s3_archive.archive.executor.task_buckets import bucket_values, last_header_values
from s3_archive.archive.executor.task_lines import base64, csv_lines, json_lines, json_string
from s3_archive.archive.protocol import FormatPlan, LinePlan
from s3_archive.keys.buckets import record_bucket
from s3_archive.keys.layout import OutputLayout

blobs = st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=6).map(str.encode),
                  st.sampled_from([b'{"f": "a/b", "t": 1700000000000}', b'{"f": -3, "t": "x"}', b"1700000000000"]))
headers = st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["f", "t", "", "ü"]), blobs), max_size=3))
records = st.lists(st.tuples(blobs, blobs, headers, st.integers(-10**12, 2**42)), min_size=1, max_size=25)


def _envelope(recs) -> pa.RecordBatch:
    n = len(recs)
    return pa.RecordBatch.from_arrays([
        pa.array([k for k, *_ in recs], pa.binary()), pa.array([v for _, v, *_ in recs], pa.binary()),
        pa.array([None if h is None else [{"key": a, "value": b} for a, b in h] for *_, h, _ in recs],
                 ENVELOPE_SCHEMA.field("headers").type),
        pa.array(["t"] * n), pa.array([2] * n, pa.int32()), pa.array(range(n), pa.int64()),
        pa.array([t * 1000 for *_, t in recs], pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
    ], schema=ENVELOPE_SCHEMA)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30), st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_base64_is_pythons_value_by_value_also_on_a_slice(values, cut):
    a = pa.array(values, pa.binary()).slice(min(cut, len(values)))
    assert base64(a).to_pylist() == [None if v is None else b64.b64encode(v).decode() for v in a.to_pylist()]


@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=20), st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_chunked_base64_is_the_jdks_mime_encoders(values, cut):
    a = pa.array(values, pa.binary()).slice(min(cut, len(values)))
    expected = []
    for v in a.to_pylist():
        text = None if v is None else b64.b64encode(v).decode()
        expected.append(None if text is None else "\r\n".join(text[i:i + 76] for i in range(0, len(text), 76)))
    assert base64(a, chunked=True).to_pylist() == expected


@given(st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=20))
@settings(max_examples=200, deadline=None)
def test_json_strings_escape_as_jackson_and_parse_back(texts):
    out = json_string(pa.array(texts, pa.string())).to_pylist()
    assert out == [_jackson(t) for t in texts]
    assert [json.loads(o) for o in out] == texts


def _jackson(t: str | None) -> str:
    """Jackson's JSON string: only quotes, backslashes and controls escaped; controls in upper-case hex."""
    if t is None:
        return "null"
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    return '"' + "".join(short.get(c, f"\\u{ord(c):04X}" if ord(c) < 0x20 else c) for c in t) + '"'


def test_last_header_value_is_the_last_of_that_name():
    env = _envelope([(None, None, [("f", b"1"), ("g", b"2"), ("f", None)], 0), (None, None, None, 0),
                     (None, None, [("f", b"3"), ("f", b"4")], 0), (None, None, [("g", b"5")], 0)])
    assert last_header_values(env.column("headers"), "f").to_pylist() == [None, None, b"4", None]
    assert last_header_values(env.column("headers").slice(2), "f").to_pylist() == [b"4", None]


LAYOUTS = [
    {"partition_by": [{"kind": "kafka_partition"}, {"kind": "key", "hive": False}]},
    {"partition_by": [{"kind": "value", "field": "f"}, {"kind": "key", "field": "f", "name": "kf"},
                      {"kind": "header", "header": "f", "name": "hf"}, {"kind": "header", "header": "ü", "name": "u"}]},
    {"timezone": "America/New_York", "partition_by": [
        {"kind": "time", "path_format": "yyyy/MM/dd/HH/mm"},
        {"kind": "time", "source": "value", "field": "t", "timezone": "Australia/Lord_Howe",
         "duration_seconds": 1800, "path_format": "yyyy-MM-dd-HH-mm"},
        {"kind": "time", "source": "header", "field": "t", "path_format": "yyyy-MM-dd"}]},
    {"template": "{{topic}}/{{timestamp:unit=yyyy}}/{{timestamp:unit=HH}}/{{topic}}+{{partition}}+{{start_offset}}"
                 "-{{key}}", "timezone": "Asia/Kathmandu", "partition_by": []},
]


@given(records)
@settings(max_examples=40, deadline=None)
def test_buckets_are_the_python_references(recs):
    env = _envelope(recs)
    for spec in LAYOUTS:
        layout = OutputLayout.model_validate(spec)
        expected = [record_bucket(layout, {"key": k, "value": v, "headers": h, "partition": 2,
                                           "timestamp_us": t * 1000}) for k, v, h, t in recs]
        assert bucket_values(layout, env, {}).to_pylist() == expected, spec


PLANS = [LinePlan("json", ("key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type")),
         LinePlan("json", ()), LinePlan("csv", ("key", "value", "offset", "timestamp", "headers")),
         LinePlan("csv", ("key", "headers", "value"), value_text=True), LinePlan("csv", ("value",), value_text=True)]


def _lines(env: pa.RecordBatch, plan: LinePlan, end: str = "") -> pa.Array:
    return json_lines(env, plan, None, end).cast(pa.binary()) if plan.kind == "json" else csv_lines(env, plan, end)


def _object(fmt: str, lines: pa.Array, cuts: list[int], ended: bool) -> bytes:
    sink = io.BytesIO()
    enc = LinesEncoder(FormatPlan(fmt, "none", ""), sink, ended)
    for a, z in zip([0, *cuts], [*cuts, len(lines)], strict=True):
        enc.write(pa.table({"_line": lines.slice(a, z - a)}))
    enc.close()
    return sink.getvalue()


@given(records, st.lists(st.integers(0, 25), max_size=3))
@settings(max_examples=60, deadline=None)
def test_lines_rendered_with_their_end_make_the_same_objects(recs, cuts):
    """The task renders each line with its end and the encoder writes them as they lie (`ended`): the same bytes as
    lines joined by the encoder, however the batches are sliced."""
    env = _envelope(recs)
    cuts = sorted(min(c, len(recs)) for c in cuts)
    for plan in PLANS:
        for fmt in (["jsonl", "json"] if plan.kind == "json" else ["csv"]):
            end = line_end(fmt)
            plain, ended = _lines(env, plan), _lines(env, plan, end.decode())
            assert ended.to_pylist() == [v + end for v in plain.to_pylist()], (plan, fmt)
            assert _object(fmt, ended, cuts, True) == _object(fmt, plain, cuts, False), (plan, fmt)
