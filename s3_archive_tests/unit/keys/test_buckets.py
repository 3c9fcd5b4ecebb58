import json
import re
from datetime import UTC, datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from s3_archive.keys.buckets import (
    EPOCH_MS_REGEX,
    bucket_from_staging_dir,
    format_time,
    java_double,
    json_field_text,
    last_header,
    parse_path,
    record_bucket,
    render_path,
    spark_escape_path_name,
    spark_unescape_path_name,
)
from s3_archive.keys.layout import OutputLayout, RecordTime
from s3_archive.keys.objects import object_key, parse_object_key, window_object_stem, window_scan_prefix
from s3_archive.keys.template import DEFAULT_TEMPLATE, ENCODED_CHARS, MAX_PART
from s3_archive.keys.values import NO_BUCKETS, decode_value, encode_bytes, encode_value
from s3_archive.model.formats import FORMATS
from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION, OffsetWindow

FAST = settings(max_examples=200, deadline=None)
SUFFIXES = sorted({spec.object_suffix(c) for spec in FORMATS.values() for c in spec.codecs})
SPECIAL = ["/", "=", "%", " ", "", "(null)", "(empty)", "(hex)00", "é", "日本", ".", "..", "_x", ".hidden", "a+b",
           "a*b", "~", "%2F", "null", "__HIVE_DEFAULT_PARTITION__", "\x00", "a/b=c d%e"]
texts = st.one_of(st.sampled_from(SPECIAL), st.text(st.characters(exclude_categories=["Cs"]), max_size=20))


def us(iso: str) -> int:
    return int(datetime.fromisoformat(iso).astimezone(UTC).timestamp() * 1_000_000)


def make(**kw) -> OutputLayout:
    return OutputLayout.model_validate(kw)


# --- the encoding ---------------------------------------------------------------------------------------------------


@FAST
@given(st.one_of(st.none(), texts))
def test_encoding_round_trips_and_is_path_safe(v):
    e = encode_value(v)
    assert decode_value(e) == v
    assert e and set(e) <= ENCODED_CHARS
    assert e[0] not in "._"  # readers skip directories starting with . or _


@FAST
@given(st.one_of(st.none(), texts), st.one_of(st.none(), texts))
def test_encoding_is_injective(a, b):
    assert (encode_value(a) == encode_value(b)) == (a == b)


@FAST
@given(st.one_of(st.none(), st.binary(max_size=12), texts.map(lambda s: s.encode())))
@example(b"\xff")
@example(b"")
@example(b"(hex)FF")
def test_binary_values_round_trip_as_text_or_hex(b):
    e = encode_bytes(b)
    back = decode_value(e)
    if b is None:
        assert back is None
    else:
        try:
            assert back == b.decode("utf-8")
        except UnicodeDecodeError:
            assert back == b and e == "(hex)" + b.hex().upper()


@pytest.mark.parametrize("v, encoded", [
    (None, "(null)"), ("", "(empty)"), ("(null)", "%28null%29"), ("(empty)", "%28empty%29"),
    ("a/b", "a%2Fb"), ("k=v", "k%3Dv"), ("a b", "a%20b"), ("100%", "100%25"), ("é", "%C3%A9"),
    (".", "%2E"), ("..", "%2E."), ("_tmp", "%5Ftmp"), ("a.b_c-d", "a.b_c-d"), ("a+b*c~", "a%2Bb%2Ac%7E"),
])
def test_known_encodings(v, encoded):
    assert encode_value(v) == encoded


@pytest.mark.parametrize("bad", ["a%2fb", "a b", "%2", "%G0", "é", "(hex)61", "(hex)", "a/b", "%41", "_x"])
def test_decode_refuses_what_encode_never_writes(bad):
    with pytest.raises(ValueError, match="not an encoded partition value"):
        decode_value(bad)


# --- config validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, message", [
    ({"timezone": "CET"}, "not an IANA time zone: 'CET'"),
    ({"timezone": "Mars/Base"}, "not an IANA time zone"),
    ({"partition_by": [{"kind": "color"}]}, "does not match any of the expected tags"),
    ({"partition_by": [{"kind": "time", "path_format": "yyyy/HH"}]}, "has HH but not MM, dd"),
    ({"partition_by": [{"kind": "time", "path_format": "'y'=yyyy:MM"}]}, "':' at position 8"),
    ({"partition_by": [{"kind": "time", "path_format": "YYYY-ww"}]}, "'w' at position 5"),
    ({"partition_by": [{"kind": "time", "path_format": "'year'"}]}, "has no time unit"),
    ({"partition_by": [{"kind": "time", "path_format": "yyyy/MM/yyyy"}]}, "uses a unit twice"),
    ({"partition_by": [{"kind": "time", "path_format": "'a b'=yyyy"}]}, "quoted text 'a b'"),
    ({"partition_by": [{"kind": "time", "path_format": "yyyy//MM"}]}, "empty path segment"),
    ({"partition_by": [{"kind": "time", "path_format": "yyyy/MM/dd", "duration_seconds": 3600}]}, "it needs HH"),
    ({"partition_by": [{"kind": "time", "duration_seconds": 90}]}, "multiple of 60"),
    ({"partition_by": [{"kind": "time", "source": "value"}]}, "give `field` with source 'value'"),
    ({"partition_by": [{"kind": "time", "field": "ts"}]}, "and not with source 'kafka_timestamp'"),
    ({"partition_by": [{"kind": "time", "path_format": "'timestamp'=yyyy"}]}, "'timestamp' repeats a data column"),
    ({"partition_by": [{"kind": "value", "field": "a..b"}]}, "not a field path"),
    ({"partition_by": [{"kind": "value", "field": "offset"}]}, "'offset' repeats a data column"),
    ({"partition_by": [{"kind": "key"}, {"kind": "header", "header": "kafka_key"}]}, "already used by"),
    ({"partition_by": [{"kind": "header", "header": "x-trace id"}]}, "give `name`"),
    ({"partition_by": [{"kind": "value", "field": "r", "name": "1r"}]}, "not a column name"),
    ({"partition_by": [{"kind": "value", "field": "r"}], "template": "{{topic}}/{{partition}}/{{start_offset}}"},
     "must contain {{partition_by}}"),
    ({"partition_by": [], "template": DEFAULT_TEMPLATE}, "partition_by is empty"),
    ({"partition_by": [{"kind": "value", "field": "r", "extra": 1}]}, "Extra inputs are not permitted"),
])
def test_bad_layouts_say_why(kw, message):
    with pytest.raises(ValidationError) as e:
        make(**kw)
    assert message in str(e.value)


def test_bare_values_need_no_column_name_and_headers_may_then_be_anything():
    lay = make(partition_by=[{"kind": "header", "header": "x-trace id", "hive": False},
                             {"kind": "value", "field": "offset", "hive": False}])
    assert render_path(lay, ["a b", None]) == "a%20b/(null)"


# --- paths ----------------------------------------------------------------------------------------------------------

RICH = make(
    template="{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-{{end_offset}}+{{part}}/"
             "{{timestamp:unit=HH}}-{{key}}",
    partition_by=[{"kind": "kafka_partition"},
                  {"kind": "time", "timezone": "Europe/Berlin", "duration_seconds": 7200},
                  {"kind": "value", "field": "order.region"},
                  {"kind": "key", "field": "tenant", "hive": False},
                  {"kind": "header", "header": "src"},
                  {"kind": "time", "source": "header", "field": "ts", "path_format": "'d'=yyyy-MM-dd"}],
    timezone="America/New_York",
)

values_or_bytes = st.one_of(st.none(), texts, st.binary(max_size=6))
times = st.one_of(st.none(), st.builds(lambda y, m, d, h: f"year={y:04d}/month={m:02d}/day={d:02d}/hour={h:02d}",
                                       st.integers(1970, 2100), st.integers(1, 12), st.integers(1, 28),
                                       st.integers(0, 23)))
days = st.one_of(st.none(), st.dates().map(lambda d: f"d={d.year:04d}-{d.month:02d}-{d.day:02d}"))


@FAST
@given(st.integers(0, MAX_PARTITION), times, st.one_of(st.none(), texts), st.one_of(st.none(), texts),
       values_or_bytes, days)
def test_paths_round_trip(p, t, region, tenant, src, d):
    values = [p, t, region, tenant, src, d]
    path = render_path(RICH, values)
    assert path.count("/") == RICH.path_segments - 1
    back = parse_path(RICH, path)
    expected = [p, t, region, tenant, src.decode() if isinstance(src, bytes) and _utf8(src) else src, d]
    assert back == expected


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


def test_a_known_rich_path():
    path = render_path(RICH, [3, None, "eu/west", "", b"\xff", "d=2024-03-31"])
    assert path == ("kafka_partition=3/year=(null)/month=(null)/day=(null)/hour=(null)/order_region=eu%2Fwest/"
                    "(empty)/src=(hex)FF/d=2024-03-31")
    assert parse_path(RICH, path) == [3, None, "eu/west", "", b"\xff", "d=2024-03-31"]


@pytest.mark.parametrize("path", [
    "kafka_partition=3",
    "kafka_partition=03/year=2024/month=03/day=31/hour=02/order_region=x/y/src=z/d=2024-03-31",
    "partition=3/year=2024/month=03/day=31/hour=02/order_region=x/y/src=z/d=2024-03-31",
    "kafka_partition=3/year=2024/month=3/day=31/hour=02/order_region=x/y/src=z/d=2024-03-31",
    "kafka_partition=3/year=2024/month=03/day=31/hour=02/region=x/y/src=z/d=2024-03-31",
    "kafka_partition=3/year=2024/month=03/day=31/hour=02/order_region=a b/y/src=z/d=2024-03-31",
])
def test_parse_path_refuses_foreign_paths(path):
    with pytest.raises(ValueError):
        parse_path(RICH, path)


# --- time buckets: time zones and DST ------------------------------------------------------------------------------


def hour_path(tz: str, iso: str, duration: int | None = None, fmt: str = "'year'=yyyy/'month'=MM/'day'=dd/'hour'=HH"):
    d = RecordTime(timezone=tz, duration_seconds=duration, path_format=fmt)
    return format_time(d, tz, us(iso))


@pytest.mark.parametrize("tz, iso, expected", [
    # Berlin spring forward 2024-03-31 02:00 CET -> 03:00 CEST: no hour 02
    ("Europe/Berlin", "2024-03-31T00:59:59+00:00", "2024-03-31T01"),
    ("Europe/Berlin", "2024-03-31T01:00:00+00:00", "2024-03-31T03"),
    # Berlin fall back 2024-10-27 03:00 CEST -> 02:00 CET: hour 02 happens twice, one bucket
    ("Europe/Berlin", "2024-10-27T00:30:00+00:00", "2024-10-27T02"),
    ("Europe/Berlin", "2024-10-27T01:30:00+00:00", "2024-10-27T02"),
    ("Europe/Berlin", "2024-10-27T02:00:00+00:00", "2024-10-27T03"),
    # New York spring forward 2024-03-10 02:00 EST -> 03:00 EDT
    ("America/New_York", "2024-03-10T06:59:59+00:00", "2024-03-10T01"),
    ("America/New_York", "2024-03-10T07:00:00+00:00", "2024-03-10T03"),
    # New York fall back 2024-11-03 02:00 EDT -> 01:00 EST
    ("America/New_York", "2024-11-03T05:30:00+00:00", "2024-11-03T01"),
    ("America/New_York", "2024-11-03T06:30:00+00:00", "2024-11-03T01"),
    # a day boundary that is a different day in UTC
    ("America/New_York", "2024-01-01T03:00:00+00:00", "2023-12-31T22"),
    ("UTC", "1969-12-31T23:59:59.999000+00:00", "1969-12-31T23"),  # Kafka's -1 "no timestamp"
])
def test_hour_buckets_follow_the_wall_clock(tz, iso, expected):
    assert hour_path(tz, iso, fmt="yyyy-MM-dd'T'HH") == expected


@pytest.mark.parametrize("tz, iso, duration, expected", [
    # 2-hour buckets are aligned to local midnight (of the naive wall clock), across DST
    ("Europe/Berlin", "2024-03-31T01:30:00+00:00", 7200, "2024-03-31T02"),  # 03:30 CEST -> 02:00 bucket
    ("Europe/Berlin", "2024-10-27T01:30:00+00:00", 7200, "2024-10-27T02"),  # 02:30 CET
    ("Europe/Berlin", "2024-10-27T00:30:00+00:00", 7200, "2024-10-27T02"),  # 02:30 CEST, same bucket
    ("America/New_York", "2024-03-10T07:30:00+00:00", 3 * 3600, "2024-03-10T03"),  # 03:30 EDT
    ("America/New_York", "2024-03-10T06:30:00+00:00", 3 * 3600, "2024-03-10T00"),  # 01:30 EST
    # daily buckets start at local midnight
    ("America/New_York", "2024-11-04T04:59:00+00:00", 86400, "2024-11-03T00"),
    ("America/New_York", "2024-11-04T05:00:00+00:00", 86400, "2024-11-04T00"),
    ("Europe/Berlin", "2024-03-30T23:00:00+00:00", 86400, "2024-03-31T00"),
    # 15-minute buckets
    ("Europe/Berlin", "2024-06-01T10:44:59+00:00", 900, "2024-06-01T12_30"),
])
def test_duration_buckets(tz, iso, duration, expected):
    fmt = "yyyy-MM-dd'T'HH" + ("'_'mm" if duration < 3600 else "")
    assert hour_path(tz, iso, duration, fmt) == expected


def test_monthly_buckets_without_a_duration():
    d = RecordTime(path_format="'year'=yyyy/'month'=MM", timezone="Europe/Berlin")
    assert format_time(d, "Europe/Berlin", us("2024-01-31T23:30:00+00:00")) == "year=2024/month=02"


# --- a record's bucket and its object key ---------------------------------------------------------------------------


def test_default_layout_reproduces_todays_keys_for_one_window():
    lay = OutputLayout()
    w = OffsetWindow(3, 1000, 2000)
    bucket = record_bucket(lay, {"partition": 3, "timestamp_us": 0, "key": b"k", "value": b"v", "headers": []})
    assert bucket == "3"
    assert object_key("arch/", "orders", w, 1, ".parquet", lay, bucket) == \
        "arch/orders/kafka_partition=3/orders+3+0000000000000001000-0000000000000002000+00001.parquet"


@FAST
@given(prefix=st.sampled_from(["", "raw/", "a/b/", "_manifests/", "x"]),
       topic=st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True).filter(lambda t: t not in (".", "..")),
       p=st.integers(0, MAX_PARTITION), start=st.integers(0, MAX_OFFSET - 1), part=st.integers(0, MAX_PART),
       suffix=st.sampled_from(SUFFIXES), data=st.data())
def test_default_layout_equals_layout_object_key(prefix, topic, p, start, part, suffix, data):
    w = OffsetWindow(p, start, data.draw(st.integers(start + 1, MAX_OFFSET)))
    lay = OutputLayout()
    bucket = record_bucket(lay, {"partition": p, "timestamp_us": 0})
    key = object_key(prefix, topic, w, part, suffix, lay, bucket)
    assert key == object_key(prefix, topic, w, part, suffix)
    assert parse_object_key(lay, prefix, key, suffix) == {
        "topic": topic, "partition_by": [p], "partition": p, "start_offset": w.start, "end_offset": w.end,
        "part": part}
    assert window_scan_prefix(lay, prefix, topic, w) == window_object_stem(prefix, topic, w)


def test_window_scan_prefix_stops_at_the_first_record_level_value():
    w = OffsetWindow(3, 10, 20)
    assert window_scan_prefix(RICH, "pre/", "orders", w) == "pre/orders/kafka_partition=3/"
    lay = make(template="{{topic}}/{{partition}}/{{start_offset}}/{{key}}/{{end_offset}}")
    assert window_scan_prefix(lay, "", "t", w) == "t/3/0000000000000000010/"


json_scalars = st.one_of(st.none(), texts, st.integers(-10**12, 10**12), st.booleans())
headers = st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["src", "ts", "other"]),
                                                  st.one_of(st.none(), st.binary(max_size=4),
                                                            st.sampled_from([b"1711846800000", b"-1", b"x"]))),
                                        max_size=4))


@st.composite
def records(draw):
    value = draw(st.one_of(
        st.none(), st.binary(max_size=6),
        st.builds(lambda r: json.dumps({"order": {"region": r}}).encode(), json_scalars),
        st.just(b'{"order": {}}'), st.just(b"[1, 2]"), st.just(b"not json")))
    key = draw(st.one_of(st.none(), st.binary(max_size=6), texts.map(str.encode),
                         st.builds(lambda t: json.dumps({"tenant": t}).encode(), json_scalars)))
    return {"key": key, "value": value, "headers": draw(headers), "partition": draw(st.integers(0, 100)),
            "timestamp_us": draw(st.integers(-10**6, 4 * 10**15))}


@FAST
@given(records(), st.integers(0, 10**12), st.integers(1, 10**6), st.integers(0, 99))
def test_a_records_object_key_parses_back_to_its_values(record, start, size, part):
    w = OffsetWindow(record["partition"], start, start + size)
    bucket = record_bucket(RICH, record)
    key = object_key("pre/", "orders", w, part, ".jsonl.gz", RICH, bucket)
    v = parse_object_key(RICH, "pre/", key, ".jsonl.gz")
    assert (v["topic"], v["partition"], v["start_offset"], v["end_offset"], v["part"]) == \
        ("orders", w.partition, w.start, w.end, part)
    assert v["partition_by"][0] == record["partition"]
    assert v["partition_by"][2] == json_field_text(record["value"], "order.region")
    assert v["key"] == (decode_value(encode_bytes(record["key"])))
    assert key.startswith(window_scan_prefix(RICH, "pre/", "orders", w))
    # the bucket string survives Spark's partition directory escaping
    assert bucket_from_staging_dir("_bucket=" + spark_escape_path_name(bucket), "_bucket") == bucket


def test_json_field_text_matches_spark_get_json_object_rules():
    f = json_field_text
    assert f(b'{"a": "x"}', "a") == "x"
    assert f(b'{"a": 5}', "a") == "5"
    assert f(b'{"a": true}', "a") == "true"
    assert f(b'{"a": null}', "a") is None
    assert f(b'{"a": {"b": [1, "\xc3\xa9"]}}', "a") == '{"b":[1,"é"]}'
    assert f(b'{"b": 1}', "a") is None
    assert f(b"[1]", "a") is None
    assert f(b"oops", "a") is None
    assert f(b'{"a": "\xff"}', "a") is None  # not UTF-8
    assert f(None, "a") is None


def test_last_header_wins_and_missing_is_none():
    assert last_header([("h", b"1"), ("h", b"2")], "h") == (True, b"2")
    assert last_header([("h", None)], "h") == (True, None)
    assert last_header(None, "h") == (False, None)


def test_bucket_with_no_values_and_a_wrong_bucket():
    lay = make(partition_by=[], template="{{topic}}/{{partition}}/{{start_offset}}")
    assert record_bucket(lay, {"partition": 0, "timestamp_us": 0}) == NO_BUCKETS
    assert object_key("", "t", OffsetWindow(0, 5, 6), 0, ".parquet", lay, NO_BUCKETS) == \
        "t/0/0000000000000000005.parquet"
    with pytest.raises(ValueError, match="has 2 values; this layout's buckets have 1"):
        object_key("", "t", OffsetWindow(0, 5, 6), 0, "", OutputLayout(), "0/x")
    with pytest.raises(ValueError, match="not an encoded partition value"):
        object_key("", "t", OffsetWindow(0, 5, 6), 0, "", OutputLayout(), "a b")


@FAST
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=30))
def test_spark_partition_path_escaping_inverts(s):
    escaped = spark_escape_path_name(s)
    assert "/" not in escaped and "=" not in escaped
    assert spark_unescape_path_name(escaped) == s


def test_epoch_ms_regex_is_the_spark_one():
    assert re.fullmatch(EPOCH_MS_REGEX.strip("^$"), "-17")
    assert not re.fullmatch(EPOCH_MS_REGEX.strip("^$"), "1.5")


@pytest.mark.parametrize(("x", "java"), [
    (1.5, "1.5"), (100.0, "100.0"), (1e7, "1.0E7"), (9999999.0, "9999999.0"), (0.001, "0.001"), (0.0009, "9.0E-4"),
    (-1.5e300, "-1.5E300"), (0.1 + 0.2, "0.30000000000000004"), (12345678.9, "1.23456789E7"), (-0.0, "-0.0"),
    (0.0, "0.0"), (1e23, "1.0E23")])
def test_java_double_is_javas_double_to_string(x, java):
    assert java_double(x) == java


def test_json_field_text_reads_as_sparks_get_json_object():
    # numbers and nested values as Jackson writes them back; a key's first occurrence; what follows the first value
    # is not read; NaN is not JSON
    assert json_field_text(b'{"a": 1.50, "a": 2}', "a") == "1.5"
    assert json_field_text(b' {"a": {"b": [1, "\\u0001\\\\", 1e3, 12345678.9]}} tail', "a") == \
        '{"b":[1,"\\u0001\\\\",1000.0,1.23456789E7]}'
    assert json_field_text(b'{"a": NaN}', "a") is None
    assert json_field_text(b'{"a": "x"}{', "a") == "x"
