"""Lenses' S3 sink (`io.lenses.streamreactor.connect.aws.s3.sink.S3SinkConnector`): each KCQL statement of
`connect.s3.kcql` → one archive.

    INSERT INTO bucket[:prefix] SELECT * FROM topic [PARTITIONBY a, _key.b, _header.c | NOPARTITION]
    [STOREAS format] [PROPERTIES('name'=value, ...)]

Objects keep the sink's names: `<prefix>/<topic>/<partition>/<offset>.<ext>`, or with PARTITIONBY
`<prefix>/<topic>/<k>=<v>/…/<topic>(<partition>_<offset>).<ext>`, padded as `padding.*` says; the offset in the
name is the window's first.
"""

from __future__ import annotations

import re

from s3_archive.config.connect_import.notes import (
    Props,
    Translation,
    archive_name,
    converter_encoding,
    refuse,
    settle_rest,
)

_TOKEN = re.compile(r"\s+|(`[^`]*`)|('(?:[^']|'')*')|([(),=;])|([^\s(),=;`']+)")
_FORMATS = {"avro": "avro", "parquet": "parquet", "json": "jsonl", "csv": "csv", "csv_withheaders": "csv",
            "text": "text", "bytes": "bytes"}
_CODECS = {"uncompressed": "none", "snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "lz4": "lz4_raw",
           "bzip2": "bzip2", "deflate": "deflate", "xz": "xz", "brotli": "brotli"}
_PADDING = {"leftpad": "left", "rightpad": "right", "noop": "none"}
_KNOWN = ("padding.type", "padding.char", "padding.length.partition", "padding.length.offset",
          "partition.include.keys", "store.envelope", "store.envelope.fields.key", "store.envelope.fields.value",
          "store.envelope.fields.headers", "store.envelope.fields.metadata", "flush.size", "flush.count",
          "flush.interval", "key.suffix")


def tokens(text: str) -> list[tuple[str, bool]]:
    """(token, quoted) pairs; backticks and single quotes removed from quoted ones."""
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise refuse("connect.s3.kcql", text[pos:pos + 40], "KCQL: an unterminated ` or ' quote")
        pos = m.end()
        if m.group(1):
            out.append((m.group(1)[1:-1], True))
        elif m.group(2):
            out.append((m.group(2)[1:-1].replace("''", "'"), True))
        elif m.group(3) or m.group(4):
            out.append((m.group(3) or m.group(4), False))
    return out


def statements(kcql: str) -> list[list[tuple[str, bool]]]:
    out: list[list[tuple[str, bool]]] = [[]]
    for tok in tokens(kcql):
        if tok == (";", False):
            out.append([])
        else:
            out[-1].append(tok)
    return [s for s in out if s]


def translate(props: Props) -> list[Translation]:
    kcql = props.get("connect.s3.kcql")
    if not kcql:
        raise refuse("connect.s3.kcql", None, "a KCQL statement: INSERT INTO bucket:prefix SELECT * FROM topic ...")
    stmts = statements(kcql)
    out = []
    for i, stmt in enumerate(stmts):
        t = _statement(stmt, props, len(stmts) > 1)
        if i == len(stmts) - 1:
            settle_rest(props, t)
        out.append(t)
    names = [t.archive["name"] for t in out]
    for i, t in enumerate(out):
        if names.count(t.archive["name"]) > 1:
            t.archive["name"] = f"{t.archive['name']}_{i + 1}"
    return out


class _Reader:
    def __init__(self, stmt: list[tuple[str, bool]]) -> None:
        self.stmt, self.pos = stmt, 0

    def peek(self) -> str | None:
        return self.stmt[self.pos][0] if self.pos < len(self.stmt) else None

    def keyword(self, *words: str) -> bool:
        tok = self.stmt[self.pos] if self.pos < len(self.stmt) else None
        if tok and not tok[1] and tok[0].upper() in words:
            self.pos += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.keyword(word):
            raise refuse("connect.s3.kcql", self.text(), f"KCQL: expected {word} at {self.peek()!r}; the form is "
                         "INSERT INTO bucket[:prefix] SELECT * FROM topic [PARTITIONBY ...] [STOREAS ...] "
                         "[PROPERTIES(...)]")

    def take(self) -> str:
        if self.pos >= len(self.stmt):
            raise refuse("connect.s3.kcql", self.text(), "KCQL: the statement ends too early")
        self.pos += 1
        return self.stmt[self.pos - 1][0]

    def text(self) -> str:
        return " ".join(t for t, _ in self.stmt)


def _statement(stmt: list[tuple[str, bool]], props: Props, several: bool) -> Translation:
    r = _Reader(stmt)
    r.expect("INSERT")
    r.expect("INTO")
    target = ""
    while r.peek() is not None and not r.keyword("SELECT"):
        target += r.take()
    bucket, _, prefix = target.partition(":")
    projection = ""
    while r.peek() is not None and not r.keyword("FROM"):
        projection += r.take()
    topic = r.take()
    t = Translation({"name": archive_name(topic if several else props.get("name") or topic)})
    if topic == "*":
        regex = props.get("topics.regex")
        if not regex:
            raise refuse("connect.s3.kcql", r.text(), "FROM `*` needs topics.regex")
        t.archive["topic_pattern"] = regex
    else:
        t.archive["topics"] = [topic]
        props.get("topics")
    if not bucket:
        raise refuse("connect.s3.kcql", r.text(), "INSERT INTO needs a bucket")
    t.archive["bucket"] = bucket
    if prefix:
        t.archive["prefix"] = prefix.strip("/") + "/"
    if projection != "*":
        t.note("name", "SELECT", projection, "maps to nothing: the sink ignores a projection other than *, and so "
               "does the archive")
    partition_by: list[tuple[str, bool]] | None = None
    fmt, kprops = "json", {}
    while r.peek() is not None:
        if r.keyword("PARTITIONBY"):
            partition_by = []
            while True:
                partition_by.append((r.take(), r.stmt[r.pos - 1][1]))
                if r.peek() != ",":
                    break
                r.take()
        elif r.keyword("NOPARTITION"):
            partition_by = None
        elif r.keyword("STOREAS"):
            fmt = r.take().lower()
        elif r.keyword("PROPERTIES"):
            kprops = _properties(r)
        elif r.peek() is not None and r.peek().upper().startswith("WITH_FLUSH_"):
            name = r.take().upper().removeprefix("WITH_")
            if r.peek() == "=":
                r.take()
            kprops[name.lower().replace("_", ".")] = r.take()
        else:
            raise refuse("connect.s3.kcql", r.text(), f"KCQL: unexpected {r.peek()!r}; allowed clauses: "
                         "PARTITIONBY, NOPARTITION, STOREAS, PROPERTIES")
    if fmt not in _FORMATS:
        raise refuse("STOREAS", fmt.upper(), f"allowed: {', '.join(f.upper() for f in _FORMATS)}")
    _format(t, props, fmt, kprops)
    _layout(t, kprops, partition_by, fmt)
    _flush(t, kprops)
    t.sink = _sink(props, kprops, bucket, prefix, fmt)
    for k in sorted(set(kprops) - set(_KNOWN)):
        t.nothing(f"PROPERTIES '{k}'", kprops[k], "not a property s3-archive knows; ignored")
    return t


def _sink(props: Props, kp: dict[str, str], bucket: str, prefix: str, fmt: str) -> dict | str:
    """The sink's objects as a Lenses foreign source."""
    if _PADDING.get(kp.get("padding.type", "LeftPad").lower()) == "right" or kp.get("padding.char", "0") != "0":
        return "padding other than LeftPad with '0': the Lenses reader reads left-padded numbers"
    src: dict = {"layout": "lenses", "bucket": bucket, "prefix": prefix.strip("/"),
                 "format": "csv" if fmt == "csv_withheaders" else fmt}
    if fmt == "csv_withheaders":
        src["csv_header"] = True
    if fmt in ("avro", "parquet", "json") and kp.get("store.envelope", "false").lower() == "true":
        src["envelope"] = True
    if fmt == "json":
        if (props.data.get("connect.s3.compression.codec") or "").lower() == "gzip":
            src["compression"] = "gzip"
        src |= {"value_encoding": converter_encoding(props, "value.converter"),
                "key_encoding": converter_encoding(props, "key.converter")}
    if kp.get("key.suffix"):
        src["key_suffix"] = kp["key.suffix"]
    return src


def _properties(r: _Reader) -> dict[str, str]:
    out: dict[str, str] = {}
    if r.take() != "(":
        raise refuse("connect.s3.kcql", r.text(), "KCQL: PROPERTIES needs ( 'name'=value, ... )")
    while r.peek() not in (")", None):
        name = r.take()
        if r.take() != "=":
            raise refuse("connect.s3.kcql", r.text(), f"KCQL: PROPERTIES: {name!r} needs =value")
        out[name] = r.take()
        if r.peek() == ",":
            r.take()
    r.take()
    return out


def _format(t: Translation, props: Props, fmt: str, kp: dict[str, str]) -> None:
    t.archive["format"] = _FORMATS[fmt]
    if fmt in ("csv", "csv_withheaders"):
        t.archive["csv_fields"] = ["value"]
        t.note("csv_fields", "STOREAS", fmt.upper(), "approximate: the sink writes the value's fields as columns; "
               "here the value, base64")
        if fmt == "csv_withheaders":
            t.archive.setdefault("sink_output", {})["csv_header"] = True
    elif fmt == "json":
        t.note("format", "STOREAS", "JSON", "jsonl: one JSON object per line, named .json as the sink names them")
    elif fmt == "bytes":
        t.note("format", "STOREAS", "BYTES", "one object per record, named <topic>+<p>+<start>-<end>+<offset>.bin "
               "in the window's directory (docs/formats.md), not the sink's names")
    if t.archive["format"] in ("avro", "parquet", "jsonl"):
        whole = kp.get("store.envelope", "false").lower() == "true"
        env = {part: kp.get(f"store.envelope.fields.{part}", str(whole or part == "value")).lower() == "true"
               for part in ("key", "value", "headers", "metadata")}
        if not all(env.values()):
            t.archive["envelope"] = env
        t.note("envelope", "store.envelope", kp.get("store.envelope", "false"), "the parts kept, each as bytes "
               "(the sink converts them with the converters)" + ("" if all(env.values()) else "; restore needs all "
                                                                  "four: set 'store.envelope'=true"))
    codec = props.get("connect.s3.compression.codec")
    if codec is not None:
        c = _CODECS.get(codec.lower())
        if c is None:
            raise refuse("connect.s3.compression.codec", codec, f"allowed: {', '.join(k.upper() for k in _CODECS)}")
        if c != "none" or t.archive["format"] in ("avro", "parquet"):
            t.archive["compression"] = c
        if codec.lower() == "lz4":
            t.note("compression", "connect.s3.compression.codec", codec, "approximate: Parquet's LZ4_RAW codec")
        level = props.int("connect.s3.compression.level", minimum=0)
        if level is not None:
            t.archive["compression_level"] = level
    if props.bool("connect.s3.skip.null.values", False):
        t.archive.setdefault("sink_output", {})["skip_tombstones"] = True
        t.note("sink_output", "connect.s3.skip.null.values", "true", "tombstones are not written, only counted "
               "(tombstones_skipped; not restorable)")


def _layout(t: Translation, kp: dict[str, str], partition_by: list[tuple[str, bool]] | None, fmt: str) -> None:
    if fmt == "bytes":
        return
    ptype = _PADDING.get(kp.get("padding.type", "LeftPad").lower())
    if ptype is None:
        raise refuse("padding.type", kp["padding.type"], "allowed: LeftPad, RightPad, NoOp")
    padding: dict = {"type": ptype}
    if ptype != "none":
        padding |= {"char": kp.get("padding.char", "0"), "partition": int(kp.get("padding.length.partition", 0)),
                    "offset": int(kp.get("padding.length.offset", 12))}
    suffix = kp.get("key.suffix", "")
    layout: dict = {"padding": padding}
    if fmt == "json":
        layout["extension"] = ".json"
    if partition_by is None:
        layout |= {"template": "{{topic}}/{{partition}}/{{start_offset}}" + suffix, "partition_by": []}
    else:
        hive = kp.get("partition.include.keys", "true").lower() == "true"
        layout |= {"template": "{{topic}}/{{partition_by}}/{{topic}}({{partition}}_{{start_offset}})" + suffix,
                   "partition_by": [d for name, quoted in partition_by if (d := _dimension(t, name, quoted, hive))]}
    t.archive["layout"] = layout
    t.note("layout", "", "", "approximate: the sink names an object by an offset of its records; here by the "
           "window's first offset, so each window's objects have their own names")


def _dimension(t: Translation, name: str, quoted: bool, hive: bool) -> dict | None:
    head, _, rest = name.partition(".") if not quoted else ("", "", name)
    if quoted or not head.startswith("_"):
        field = name if quoted else name
        return {"kind": "value", "field": field, "hive": hive}
    if head == "_value" and rest:
        return {"kind": "value", "field": rest, "hive": hive}
    if head == "_key":
        return {"kind": "key", "hive": hive} | ({"field": rest} if rest else {})
    if head in ("_header", "_headers") and rest:
        return {"kind": "header", "header": rest, "hive": hive}
    if head == "_partition" and not rest:
        return {"kind": "kafka_partition", "hive": hive}
    if head == "_topic" and not rest:
        t.note("layout", "PARTITIONBY", name, "maps to nothing: the topic is already in every key")
        return None
    raise refuse("PARTITIONBY", name, "allowed: a value field (f or _value.f), _key, _key.f, _header.h, "
                 "_partition, _topic")


def _flush(t: Translation, kp: dict[str, str]) -> None:
    def num(name: str, default: int) -> int:
        try:
            return int(kp.get(name, default))
        except ValueError:
            raise refuse(f"PROPERTIES '{name}'", kp[name], "an integer") from None

    flush = {"count": num("flush.count", 50_000), "bytes": num("flush.size", 500_000_000),
             "interval_seconds": num("flush.interval", 3_600)}
    t.archive["flush"] = flush
    t.note("flush", "flush.count/flush.size/flush.interval", f"{flush['count']}/{flush['bytes']}/"
           f"{flush['interval_seconds']}", "windows of count records, capped near flush.size bytes (estimated "
           "from recent windows); a partial window is cut once its oldest record is interval seconds old (the "
           "sink's defaults where not set)")
