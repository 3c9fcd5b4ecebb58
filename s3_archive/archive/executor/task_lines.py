"""The lines of csv, jsonl and json made in the task from the envelope (`read_path: librdkafka`): the bytes
driver/spark_job.py::_payload's Spark expressions give, vectorised with Arrow compute and numpy (no Python object
per record).

- base64 (what `to_json` writes for a binary, Jackson's default variant; Spark's `base64` function the same,
  chunked: see csv): the standard alphabet with `=` padding; each value padded with zero bytes to a multiple of
  three, the whole buffer encoded at once (binascii), the padding's characters then set to `=`.
- JSON text (`to_json` with ignoreNullFields false, Jackson's generator): a field per stored column in order, null
  as `null`; strings escape `"`, `\\` and the controls below U+0020 (`\\b \\t \\n \\f \\r`, the others `\\u00XX`
  in upper-case hex), nothing else; timestamps as `yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX` in the session's time zone
  (UTC: `Z`); headers an array of `{"key":…,"value":…}`.
- csv (`to_csv` with nullValue "", emptyValue `""`, escape `"`): Spark's `base64` function chunks (a CRLF after
  every 76 characters, the JDK's MIME encoder), and a field holding a line break is quoted; the fields (base64,
  digits, `:` and `;`) need no other quoting, so a null field is empty and an empty one is `""`; headers are
  `b64(name):b64(value)` joined with `;` (a null value: nothing after the colon; no headers: an empty field).
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.protocol import LinePlan

_CONTROL_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_CONTROLS = "[\\x00-\\x1f]"


def _offsets(a: pa.Array) -> np.ndarray:
    width = 8 if pa.types.is_large_binary(a.type) or pa.types.is_large_string(a.type) else 4
    return np.frombuffer(a.buffers()[1], dtype=f"<i{width}", count=len(a) + 1, offset=a.offset * width)


def base64(values: pa.Array, chunked: bool = False) -> pa.Array:
    """Each binary (or string) value's base64 as a string; null stays null. `chunked`: as Spark's `base64`
    function writes it (the JDK's MIME encoder): a CRLF after every 76 characters but the last."""
    n = len(values)
    if n == 0:
        return pa.array([], pa.string())
    values = values.cast(pa.binary()) if pa.types.is_string(values.type) else values
    lengths = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    short = (3 - lengths % 3) % 3  # zero bytes each value needs to fill its last group of three
    if short.any() or values.null_count:  # appended by Arrow, value by value (a null becomes empty)
        zeros = _ZEROS.take(pa.array(short)).cast(values.type)
        values = pc.binary_join_element_wise(values, zeros, pa.scalar(b"", values.type))
    offsets = _offsets(values).astype(np.int64)
    data = values.buffers()[2]
    raw = memoryview(data)[int(offsets[0]):int(offsets[-1])] if data is not None else b""
    text = bytearray(binascii.b2a_base64(raw, newline=False))
    out = np.frombuffer(text, dtype=np.uint8)
    quads = (lengths + short) // 3 * 4
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(quads, out=out_offsets[1:])
    ends = out_offsets[1:]
    one, two = short == 1, short == 2
    out[ends[one | two] - 1] = ord("=")
    out[ends[two] - 2] = ord("=")
    if chunked and (np.diff(out_offsets) > _MIME_LINE).any():
        return _line_breaks(text, out_offsets, pc.is_null(values) if values.null_count else None)
    validity = None if values.null_count == 0 else pc.is_valid(values).buffers()[1]  # a new array: bit 0 first
    if out_offsets[-1] >= 1 << 31:
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(out_offsets), pa.py_buffer(text), validity)
    return pa.StringArray.from_buffers(n, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(text), validity)


_ZEROS = pa.array([b"", b"\0", b"\0\0"], pa.binary())  # by `short`: none, one or two zero bytes
_MIME_LINE = 76


def _line_breaks(text: bytearray, offsets: np.ndarray, nulls: pa.Array | None) -> pa.Array:
    """The values of `text` (at `offsets`; null where `nulls`) with a CRLF after every 76 characters but the last
    ones: each value cut in place into its pieces of 76 (a list of them, no copy), the pieces joined again with CRLF
    by Arrow (one copy, a memcpy per piece)."""
    n = len(offsets) - 1
    pieces = np.maximum(np.diff(offsets) - 1, 0) // _MIME_LINE + 1  # an empty value: one empty piece
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(pieces, out=first[1:])
    owner = np.repeat(np.arange(n), pieces)
    cuts = np.empty(int(first[-1]) + 1, dtype=np.int64)
    cuts[:-1] = offsets[owner] + _MIME_LINE * (np.arange(len(owner)) - first[owner])
    cuts[-1] = offsets[-1]
    large = offsets[-1] >= 1 << 31
    kind, width = (pa.large_string(), np.int64) if large else (pa.string(), np.int32)
    cut = pa.Array.from_buffers(kind, len(owner), [None, pa.py_buffer(cuts.astype(width)), pa.py_buffer(text)])
    lists = pa.ListArray.from_arrays(pa.array(first.astype(np.int32)), cut, mask=nulls)
    return pc.binary_join(lists, "\r\n")


def _escaped(text: pa.Array) -> pa.Array:
    """Strings escaped as Jackson writes them, without the quotes."""
    s = text.cast(pa.string())
    if pc.any(pc.match_substring_regex(s, "[\"\\\\]")).as_py():
        s = pc.replace_substring(s, "\\", "\\\\")
        s = pc.replace_substring(s, '"', '\\"')
    if pc.any(pc.match_substring_regex(s, _CONTROLS)).as_py():
        for c in range(0x20):
            ch = chr(c)
            if pc.any(pc.match_substring(s, ch)).as_py():
                s = pc.replace_substring(s, ch, _CONTROL_ESCAPES.get(c, f"\\u{c:04X}"))
    return s


def _quoted(text: pa.Array) -> list[pa.Array | str]:
    """The pieces of each string quoted, null as `null`: the quotes are pieces of their own, so the text is copied
    once, into the line."""
    if text.null_count == 0:
        return ['"', text, '"']
    quote = pc.if_else(text.is_valid(), '"', "")
    return [quote, pc.fill_null(text, "null"), quote]


def json_string(text: pa.Array) -> pa.Array:
    """Each string as JSON text, quoted and escaped as Jackson writes it; null as `null`."""
    return _join(*_quoted(_escaped(text)))


def _join(*parts: pa.Array | str) -> pa.Array:
    """The element-wise concatenation of arrays and constant strings (null where an array is null); adjacent
    constants are joined first (Arrow's cost is per row and part)."""
    merged: list[pa.Array | str] = []
    for p in parts:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        elif not (isinstance(p, str) and not p):
            merged.append(p)
    arrays = [pa.scalar(p, pa.string()) if isinstance(p, str) else p for p in merged]
    return pc.binary_join_element_wise(*arrays, pa.scalar("", pa.string()))


def _distinct(values: pa.Array, render: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """`render` of each value, run over the distinct values only (header names: a few per topic)."""
    encoded = pc.dictionary_encode(values)
    return render(encoded.dictionary).take(encoded.indices)


@functools.cache
def _clock_texts() -> pa.Array:
    """`HH:mm:ss` of every second of a day, by the second."""
    sod = np.arange(86_400)
    return pa.array([f"{h:02d}:{m:02d}:{x:02d}" for h, m, x in zip(sod // 3600, sod // 60 % 60, sod % 60,
                                                                    strict=True)], pa.string())


def _timestamp_text(ts: pa.Array) -> pa.Array:
    """Spark's `yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX` in UTC (the session's time zone, io/spark.py): the date once per
    distinct day, the clock from a table of the day's seconds, the microseconds zero-padded."""
    micros = pc.fill_null(ts.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    seconds = np.floor_divide(micros, 1_000_000)
    days = pa.array(np.floor_divide(seconds, 86_400).astype(np.int32), pa.date32())
    encoded = pc.dictionary_encode(days)
    dates = pc.strftime(encoded.dictionary, format="%Y-%m-%d").take(encoded.indices)
    clock = _clock_texts().take(pa.array(seconds - np.floor_divide(seconds, 86_400) * 86_400))
    fraction = pc.utf8_lpad(pa.array(micros - seconds * 1_000_000).cast(pa.string()), 6, "0")
    return pc.if_else(ts.is_valid(), _join('"', dates, "T", clock, ".", fraction, 'Z"'), "null")


def _headers_json(headers: pa.ListArray) -> pa.Array:
    pairs = headers.values
    rendered = _join('{"key":', _distinct(pairs.field("key"), json_string), ',"value":',
                     *_quoted(base64(pairs.field("value"))), "}")
    lists = pa.ListArray.from_arrays(headers.offsets, rendered, mask=headers.is_null())
    return pc.fill_null(_join("[", pc.binary_join(lists, ","), "]"), "null")


def _json_field(env: pa.RecordBatch, name: str, plan: LinePlan) -> list[pa.Array | str]:
    col = env.column(name)
    if name in ("key", "value"):
        return _quoted(_escaped(col) if name == "value" and plan.value_utf8 else base64(col))
    if name == "headers":
        return [_headers_json(col)]
    if name == "topic":
        return [_distinct(col, json_string)]
    if name == "timestamp":
        return [_timestamp_text(col)]
    return [pc.fill_null(col.cast(pa.string()), "null")]


def json_lines(env: pa.RecordBatch, plan: LinePlan, value: pa.Array | None, end: str = "") -> pa.Array:
    """Each record's `to_json` of its stored columns, followed by `end` (the object's line end, rendered with the
    line: encoders.py::line_end). `value`: the value as a string (value_decoding utf8)."""
    if value is not None:
        env = env.set_column(env.schema.get_field_index("value"), "value", value)
    parts: list[pa.Array | str] = []
    for i, name in enumerate(plan.fields):
        parts += ["{" if i == 0 else ",", f'"{name}":', *_json_field(env, name, plan)]
    if not parts:
        return pa.array(["{}" + end] * env.num_rows, pa.string())
    return _join(*parts, "}" + end)


def _csv_field(text: pa.Array) -> list[pa.Array | str]:
    """The pieces of a field as to_csv writes it: null → empty, empty → `""`, quoted when it holds a line break
    (chunked base64; the fields here hold no quote, comma or other character that needs quoting)."""
    empty = pc.equal(text, "")
    if pc.any(empty).as_py():
        text = pc.if_else(empty, '""', text)
    if text.null_count:
        text = pc.fill_null(text, "")
    broken = pc.match_substring(text, "\n")
    if not pc.any(broken).as_py():
        return [text]
    quote = pc.if_else(broken, '"', "")
    return [quote, text, quote]


def _csv_headers(headers: pa.ListArray) -> pa.Array:
    pairs = headers.values
    rendered = _join(_distinct(pairs.field("key"), lambda k: base64(k, chunked=True)), ":",
                     pc.fill_null(base64(pairs.field("value"), chunked=True), ""))
    lists = pa.ListArray.from_arrays(headers.offsets, rendered, mask=headers.is_null())
    return pc.fill_null(pc.binary_join(lists, ";"), "")


def _csv_values(env: pa.RecordBatch, name: str) -> pa.Array:
    if name in ("key", "value"):
        return base64(env.column(name), chunked=True)
    if name == "headers":
        return _csv_headers(env.column("headers"))
    if name == "timestamp":
        micros = env.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)  # unix_millis: floor
        return pa.array(np.floor_divide(micros, 1000)).cast(pa.string())
    return env.column(name).cast(pa.string())


def csv_lines(env: pa.RecordBatch, plan: LinePlan, end: str = "") -> pa.Array:
    """Each record's `to_csv` line (binary) followed by `end` (as json_lines); with `value_text` the raw value last,
    after a comma."""
    fields = plan.fields[:-1] if plan.value_text else plan.fields
    parts: list[pa.Array | str] = []
    for i, name in enumerate(fields):
        if i:
            parts.append(",")
        parts += _csv_field(_csv_values(env, name))
    if not plan.value_text:
        return _join(*parts, end).cast(pa.binary())
    raw = pc.fill_null(env.column("value"), b"")
    if not parts and not end:
        return raw
    pieces = [_join(*parts, ",").cast(pa.binary())] if parts else []
    nothing = pa.scalar(b"", pa.binary())
    return pc.binary_join_element_wise(*pieces, raw, pa.scalar(end.encode(), pa.binary()), nothing)
