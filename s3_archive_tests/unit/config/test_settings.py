import re
from pathlib import Path

import pytest

from s3_archive.config.settings import Settings, load_settings, parse_settings, resolve_topic_patterns
from s3_archive.model.errors import InvalidConfig
from s3_archive.model.formats import FORMATS

BASE = {"name": "orders_archive", "topics": ["orders"], "bucket": "my-bucket"}


def config(**overrides) -> dict:
    return {"archives": [{**BASE, **overrides}]}


def error_of(data) -> str:
    with pytest.raises(InvalidConfig) as e:
        parse_settings(data)
    msg = str(e.value)
    assert msg.startswith("invalid s3-archive config:")
    return msg


def error_lines(msg: str) -> list[str]:
    return [line.strip() for line in msg.splitlines()[1:]]


# --- a valid config ----------------------------------------------------------------------------------------------


def test_minimal_config_gets_defaults():
    s = parse_settings(config())
    assert isinstance(s, Settings)
    [a] = s.archives
    assert a.name == "orders_archive"
    assert a.topics == ["orders"]
    assert a.bucket == "my-bucket"
    assert a.prefix == ""
    assert a.format == "parquet"
    assert a.compression is None
    assert a.codec == "snappy"
    assert a.flush.count == 1_000_000
    assert a.flush.bytes == 64 << 20
    assert a.flush.interval_seconds == 600
    assert a.max_records_per_object is None
    assert a.on_data_loss == "fail"
    assert a.windows_per_run == 100
    assert a.bytes_per_run == 2 << 30


def test_full_config_kept():
    s = parse_settings(config(prefix="raw/kafka/", format="jsonl", compression="gzip",
                              flush={"count": 5, "bytes": 1024, "interval_seconds": 1.5},
                              max_records_per_object=100, on_data_loss="record_gap", windows_per_run=500))
    [a] = s.archives
    assert a.prefix == "raw/kafka/"
    assert (a.format, a.compression, a.codec) == ("jsonl", "gzip", "gzip")
    assert (a.flush.count, a.flush.bytes, a.flush.interval_seconds) == (5, 1024, 1.5)
    assert a.max_records_per_object == 100
    assert a.on_data_loss == "record_gap"
    assert a.windows_per_run == 500


def test_interval_can_be_disabled():
    assert parse_settings(config(flush={"interval_seconds": None})).archives[0].flush.interval_seconds is None


@pytest.mark.parametrize("prefix,normalized", [("", ""), ("raw", "raw/"), ("raw/", "raw/"), ("a/b", "a/b/"),
                                               ("a/b/", "a/b/")])
def test_prefix_normalized_to_end_with_slash(prefix, normalized):
    assert parse_settings(config(prefix=prefix)).archives[0].prefix == normalized


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_codec_defaults_per_format(fmt):
    a = parse_settings(config(format=fmt)).archives[0]
    assert a.compression is None
    assert a.codec == FORMATS[fmt].default_codec


def test_codec_defaults_are_snappy_for_parquet_and_none_for_jsonl():
    assert parse_settings(config(format="parquet")).archives[0].codec == "snappy"
    assert parse_settings(config(format="jsonl")).archives[0].codec == "none"


@pytest.mark.parametrize("fmt,codec", [(f, c) for f in sorted(FORMATS) for c in FORMATS[f].codecs])
def test_every_supported_codec_accepted(fmt, codec):
    assert parse_settings(config(format=fmt, compression=codec)).archives[0].codec == codec


def test_several_archives_and_archive_for():
    s = parse_settings({"archives": [
        {**BASE, "name": "a", "topics": ["t1", "t2"]},
        {**BASE, "name": "b", "topics": ["t3"], "bucket": "other-bucket"},
    ]})
    assert [a.name for a in s.archives] == ["a", "b"]
    assert s.archive_for("t2").name == "a"
    assert s.archive_for("t3").bucket == "other-bucket"
    with pytest.raises(KeyError):
        s.archive_for("t4")


@pytest.mark.parametrize("bucket", ["abc", "a" * 63, "my.bucket-1", "0bucket9"])
def test_good_bucket_names(bucket):
    assert parse_settings(config(bucket=bucket)).archives[0].bucket == bucket


@pytest.mark.parametrize("topic", ["a", "x" * 249, "Orders.v1_raw-2", "_manifests", "_staging", "..."])
def test_good_topic_names(topic):
    assert parse_settings(config(topics=[topic])).archives[0].topics == [topic]


def test_settings_are_frozen():
    s = parse_settings(config())
    with pytest.raises(Exception):
        s.archives[0].bucket = "other"  # type: ignore[misc]


# --- bad values: the message names the key path and what is allowed / what was given --------------------------


@pytest.mark.parametrize("count", [0, -1])
def test_flush_count_below_one(count):
    msg = error_of(config(flush={"count": count}))
    assert error_lines(msg) == [f"archives[0].flush.count: Input should be greater than or equal to 1, got {count}"]


@pytest.mark.parametrize("field,value,bound", [
    ("windows_per_run", 0, "greater than or equal to 1"),
    ("windows_per_run", 501, "less than or equal to 500"),
    ("max_records_per_object", 0, "greater than or equal to 1"),
])
def test_numeric_bounds(field, value, bound):
    msg = error_of(config(**{field: value}))
    assert f"archives[0].{field}: " in msg
    assert bound in msg
    assert f"got {value}" in msg


@pytest.mark.parametrize("flush,path,bound", [
    ({"bytes": 0}, "archives[0].flush.bytes", "greater than or equal to 1"),
    ({"interval_seconds": 0}, "archives[0].flush.interval_seconds", "greater than 0"),
    ({"interval_seconds": -5}, "archives[0].flush.interval_seconds", "greater than 0"),
])
def test_flush_bounds(flush, path, bound):
    msg = error_of(config(flush=flush))
    assert f"{path}: " in msg
    assert bound in msg


def test_error_in_second_archive_names_its_index():
    msg = error_of({"archives": [BASE, {**BASE, "name": "b", "topics": ["t2"], "flush": {"count": 0}}]})
    assert "archives[1].flush.count: " in msg
    assert "archives[0]" not in msg


@pytest.mark.parametrize("bucket", ["ab", "a" * 64, "My-Bucket", "my_bucket", "-bucket", "bucket-", ".bucket",
                                    "bucket.", "my..bucket", "my bucket", ""])
def test_bad_bucket_name(bucket):
    msg = error_of(config(bucket=bucket))
    [line] = error_lines(msg)
    assert line.startswith("archives[0].bucket: ")
    assert "not a valid S3 bucket name" in line
    assert repr(bucket) in line
    assert "3-63 of a-z 0-9 . -" in line  # what is allowed


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "t\u00e9", "x" * 250, "a:b"])
def test_bad_topic_name(topic):
    msg = error_of(config(topics=["good", topic]))
    [line] = error_lines(msg)
    assert line.startswith("archives[0].topics: ")
    assert repr(topic) in line
    assert "allowed: 1-249 of a-z A-Z 0-9 . _ -" in line


@pytest.mark.parametrize("field,value", [("bucket", "my-bucket\n"), ("topics", ["orders\n"]),
                                         ("name", "orders_archive\n")])
def test_trailing_newline_rejected(field, value):
    # A YAML block scalar (`bucket: |`) ends with a newline; re's `$` matches before a trailing newline, so
    # `^...$` + match() lets it through. A newline is not allowed in a bucket, topic or archive name.
    msg = error_of(config(**{field: value}))
    assert f"archives[0].{field}" in msg


def test_no_topics_and_no_pattern():
    msg = error_of(config(topics=[]))
    assert error_lines(msg) == ["archives[0]: give `topics` (a list of topic names), `topic_pattern` (a regex), "
                                "or both"]


def test_bad_topic_pattern():
    msg = error_of(config(topic_pattern="orders.(["))
    [line] = error_lines(msg)
    assert line.startswith("archives[0].topic_pattern: not a valid regular expression: 'orders.(['")


def test_topic_patterns_resolve_against_the_cluster_topics():
    settings = parse_settings({"archives": [
        {**BASE, "name": "a", "topics": ["orders.eu"], "topic_pattern": r"orders\..*"},
        {**BASE, "name": "b", "topics": [], "topic_pattern": r".*\.eu"},
    ]})
    cluster = ["orders.eu", "orders.us", "orders.asia", "clicks.eu", "__consumer_offsets", "ordersXus", "x.orders.us"]
    resolved = resolve_topic_patterns(settings, cluster)
    # explicit first; then the pattern's matches (full match, sorted); a topic goes to the first archive claiming it
    assert resolved.archives[0].topics == ["orders.eu", "orders.asia", "orders.us"]
    assert resolved.archives[1].topics == ["clicks.eu"]
    # no Kafka reachable when definitions load: explicit topics only
    assert [a.topics for a in resolve_topic_patterns(settings, []).archives] == [["orders.eu"], []]


def test_a_pattern_never_matches_a_dead_letter_topic():
    settings = parse_settings({"archives": [
        {**BASE, "name": "a", "topics": [], "topic_pattern": r"orders.*", "dead_letter_topic": "{topic}.dlq",
         "value_decoding": {"type": "utf8", "on_error": "dead_letter"}},
        {**BASE, "name": "b", "topics": [], "topic_pattern": r".*", "dead_letter_topic": "all-dead",
         "value_decoding": {"type": "utf8", "on_error": "dead_letter"}},
    ]})
    resolved = resolve_topic_patterns(settings, ["orders", "orders.dlq", "orders.dlq.dlq", "all-dead", "clicks"])
    assert [a.topics for a in resolved.archives] == [["orders"], ["clicks"]]


def test_no_archives():
    for data in ({"archives": []}, {}):
        msg = error_of(data)
        assert "archives" in error_lines(msg)[0]


def test_duplicate_topics_within_an_archive():
    msg = error_of(config(topics=["a", "b", "a", "c", "b"]))
    assert error_lines(msg) == ["archives[0].topics: topics listed twice: ['a', 'b']"]


def _path_of_error(msg: str) -> str:
    [line] = error_lines(msg)
    return line.split(": ", 1)[0]


def test_topic_in_two_archives():
    msg = error_of({"archives": [{**BASE, "name": "a", "topics": ["x", "shared"]},
                                 {**BASE, "name": "b", "topics": ["shared"]}]})
    assert "archives[1].topics: topic 'shared' is already in archives[0] ('a')" in msg
    assert "a topic belongs to one archive" in msg
    # the key path of the offending value, not "(top level)"
    assert _path_of_error(msg).startswith("archives"), msg


def test_duplicate_archive_names():
    msg = error_of({"archives": [{**BASE, "name": "a", "topics": ["t1"]},
                                 {**BASE, "name": "a", "topics": ["t2"]}]})
    assert "archives[1].name: 'a' is already the name of archives[0]; archive names must be unique" in msg
    # the key path of the offending value, not "(top level)"
    assert _path_of_error(msg).startswith("archives"), msg


@pytest.mark.parametrize("name", ["Orders", "1orders", "orders-archive", "", "a" * 64, "_x"])
def test_bad_archive_name(name):
    msg = error_of(config(name=name))
    [line] = error_lines(msg)
    assert line.startswith("archives[0].name: ")
    assert repr(name) in line
    assert "lowercase letters, digits, _" in line


@pytest.mark.parametrize("where,data,path", [
    ("archive", config(buckets="x"), "archives[0].buckets"),
    ("flush", config(flush={"count": 5, "size": 10}), "archives[0].flush.size"),
    ("top", {**config(), "archive": []}, "archive"),
])
def test_unknown_key_forbidden(where, data, path):
    msg = error_of(data)
    [line] = error_lines(msg)
    assert line.startswith(f"{path}: ")
    assert "Extra inputs are not permitted" in line


@pytest.mark.parametrize("fmt,codec", [("jsonl", "snappy"), ("jsonl", "lz4_raw"), ("parquet", "bzip2"),
                                       ("parquet", "ZSTD"), ("jsonl", "")])
def test_unsupported_compression_lists_supported_codecs(fmt, codec):
    msg = error_of(config(format=fmt, compression=codec))
    [line] = error_lines(msg)
    assert line.startswith("archives[0]: ")
    assert f"compression {codec!r} is not supported for format {fmt!r}" in line
    assert line.endswith("supported: " + ", ".join(FORMATS[fmt].codecs))


def test_bad_format():
    msg = error_of(config(format="xml"))
    assert error_lines(msg) == ["archives[0].format: Input should be 'parquet', 'avro', 'jsonl', 'json', 'csv', "
                                "'text', 'bytes' or 'iceberg', got 'xml'"]


def test_task_reader_is_native_by_default_and_a_bad_one_names_both_readers():
    assert parse_settings(config()).archives[0].task_reader == "native"
    msg = error_of(config(task_reader="rust"))
    assert error_lines(msg) == ["archives[0].task_reader: Input should be 'native' or 'python', got 'rust'"]


def test_bad_on_data_loss():
    msg = error_of(config(on_data_loss="ignore"))
    [line] = error_lines(msg)
    assert line.startswith("archives[0].on_data_loss: ")
    assert "'fail' or 'record_gap'" in line
    assert "got 'ignore'" in line


@pytest.mark.parametrize("prefix", ["/", "/raw", "/raw/"])
def test_prefix_starting_with_slash(prefix):
    msg = error_of(config(prefix=prefix))
    assert error_lines(msg) == [f"archives[0].prefix: must not start with '/', got {prefix!r}"]


def test_wrong_types_name_path_and_value():
    msg = error_of(config(topics=["ok", 5], flush={"count": "many"}))
    lines = error_lines(msg)
    assert any(line.startswith("archives[0].topics[1]: ") and "got 5" in line for line in lines), lines
    assert any(line.startswith("archives[0].flush.count: ") and "got 'many'" in line for line in lines), lines


def test_all_errors_reported_at_once():
    msg = error_of(config(bucket="B", format="xml", flush={"count": 0}))
    paths = sorted(line.split(": ", 1)[0] for line in error_lines(msg))
    assert paths == ["archives[0].bucket", "archives[0].flush.count", "archives[0].format"]


@pytest.mark.parametrize("data", [None, [], "archives", 42])
def test_not_a_mapping(data):
    msg = error_of(data)
    assert "(top level)" in msg


def test_invalid_config_is_value_error_and_not_chained():
    assert issubclass(InvalidConfig, ValueError)
    with pytest.raises(InvalidConfig) as e:
        parse_settings(config(flush={"count": 0}))
    assert e.value.__cause__ is None
    assert e.value.__suppress_context__


# --- load_settings -----------------------------------------------------------------------------------------------

GOOD_YAML = """\
archives:
  - name: orders_archive
    topics: [orders, payments]
    bucket: my-bucket
    prefix: raw
    format: jsonl
    flush:
      count: 500
"""


def test_load_settings(tmp_path: Path):
    f = tmp_path / "archives.yaml"
    f.write_text(GOOD_YAML)
    s = load_settings(f)
    [a] = s.archives
    assert a.topics == ["orders", "payments"]
    assert a.prefix == "raw/"
    assert a.codec == "none"
    assert a.flush.count == 500
    assert s == parse_settings({"archives": [{"name": "orders_archive", "topics": ["orders", "payments"],
                                              "bucket": "my-bucket", "prefix": "raw", "format": "jsonl",
                                              "flush": {"count": 500}}]})


def test_load_settings_bad_value_names_the_key(tmp_path: Path):
    f = tmp_path / "archives.yaml"
    f.write_text(GOOD_YAML.replace("count: 500", "count: 0"))
    with pytest.raises(InvalidConfig, match=re.escape("archives[0].flush.count: ")):
        load_settings(f)


def test_load_settings_missing_file(tmp_path: Path):
    f = tmp_path / "nope.yaml"
    with pytest.raises(InvalidConfig) as e:
        load_settings(f)
    msg = str(e.value)
    assert str(f) in msg
    assert "No such file or directory" in msg


def test_load_settings_directory(tmp_path: Path):
    with pytest.raises(InvalidConfig) as e:
        load_settings(tmp_path)
    assert str(tmp_path) in str(e.value)


@pytest.mark.parametrize("text", ["archives: [\n", "archives:\n  - name: a\n bucket: b\n", "a: b: c\n",
                                  "archives: {name: 'x}\n"])
def test_load_settings_invalid_yaml(tmp_path: Path, text):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(InvalidConfig) as e:
        load_settings(f)
    msg = str(e.value)
    assert msg.startswith(f"{f} is not valid YAML: ")
    assert "line" in msg  # YAML errors carry the position


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "null\n"])
def test_load_settings_empty_file(tmp_path: Path, text: str):
    f = tmp_path / "empty.yaml"
    f.write_text(text)
    with pytest.raises(InvalidConfig, match=re.escape("(top level)")) as e:
        load_settings(f)
    # One line naming the key the file needs, not pydantic's model class.
    assert str(e.value) == ("invalid s3-archive config:\n  (top level): the file is empty; the config needs the key "
                            "`archives`: a list of archives (and optionally `foreign_sources`)")
    assert "Settings" not in str(e.value)


@pytest.mark.parametrize("text, line", [
    ("archives:\n", "archives: Input should be a valid list, got None"),
    ("archives: []\n", "archives: List should have at least 1 item after validation, not 0, got []"),
    ("- name: a\n", "(top level): the config needs the key `archives`: a list of archives (and optionally "
                    "`foreign_sources`), got a list [{'name': 'a'}]"),
])
def test_a_config_without_archives_names_the_key(tmp_path: Path, text: str, line: str):
    f = tmp_path / "archives.yaml"
    f.write_text(text)
    with pytest.raises(InvalidConfig) as e:
        load_settings(f)
    assert error_lines(str(e.value)) == [line]


def test_load_settings_yaml_block_scalar_keeps_newline_out_of_bucket(tmp_path: Path):
    # `bucket: |` yields "my-bucket\n"; it must not pass as a bucket name.
    f = tmp_path / "archives.yaml"
    f.write_text(GOOD_YAML.replace("bucket: my-bucket", "bucket: |\n      my-bucket"))
    with pytest.raises(InvalidConfig, match=re.escape("archives[0].bucket")):
        load_settings(f)


def test_csv_fields_only_for_csv():
    msg = error_of(config(format="parquet", csv_fields=["key"]))
    [line] = error_lines(msg)
    assert line == ("archives[0].csv_fields: applies to format 'csv' only; this archive's format is 'parquet' "
                    "(remove csv_fields, or set format: csv)")
    assert error_lines(error_of(config(csv_fields=["key"]))) == [line]  # parquet is the default format
    [twice] = error_lines(error_of(config(format="csv", csv_fields=["key", "key"])))
    assert twice == "archives[0].csv_fields: lists a field twice: ['key', 'key']"
    assert parse_settings(config(format="csv", csv_fields=["value", "key"])).archives[0].csv_fields == ["value", "key"]


# --- cron mode, retention headroom, start position --------------------------------------------------------------


def test_schedule_cron_start_position_and_warn_fraction():
    a = parse_settings(config()).archives[0]
    assert (a.schedule_cron, a.start_position, a.retention_warn_fraction) == (None, "earliest", 0.8)
    a = parse_settings(config(schedule_cron="*/15 * * * *", start_position="latest",
                              retention_warn_fraction=1)).archives[0]
    assert (a.schedule_cron, a.start_position, a.retention_warn_fraction) == ("*/15 * * * *", "latest", 1.0)
    assert parse_settings(config(start_position=1_700_000_000_000)).archives[0].start_position == 1_700_000_000_000
    assert parse_settings(config(start_position=-1)).archives[0].start_position == -1


def test_bad_schedule_cron_names_the_value():
    assert error_lines(error_of(config(schedule_cron="every hour"))) == [
        "archives[0].schedule_cron: not a valid cron string: 'every hour' (five fields, e.g. '*/15 * * * *')"]


@pytest.mark.parametrize("value", [0, -0.1, 1.5])
def test_bad_retention_warn_fraction(value):
    msg = error_of(config(retention_warn_fraction=value))
    assert "archives[0].retention_warn_fraction: " in msg and f"got {value}" in msg


@pytest.mark.parametrize("value", [-2, "middle", True])
def test_bad_start_position(value):
    msg = error_of(config(start_position=value))
    assert "archives[0].start_position" in msg and (repr(value) in msg or str(value) in msg)


# --- layout: key template and partition_by ------------------------------------------------------------------------


def test_layout_defaults_to_none_and_an_empty_layout_is_todays():
    assert parse_settings(config()).archives[0].layout is None
    lay = parse_settings(config(layout={})).archives[0].layout
    assert lay.template == "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-{{end_offset}}+{{part}}"
    assert [d.kind for d in lay.partition_by] == ["kafka_partition"]
    assert lay.timezone == "UTC"


def test_layout_full_config_kept():
    lay = parse_settings(config(layout={
        "template": "{{topic}}/{{partition_by}}/{{topic}}-{{partition}}-{{start_offset}}-{{part}}",
        "partition_by": [{"kind": "time", "path_format": "'dt'=yyyy-MM-dd", "timezone": "Europe/Berlin"},
                         {"kind": "value", "field": "order.region", "name": "region"},
                         {"kind": "header", "header": "src", "hive": False}],
        "padding": {"type": "left", "char": "0", "partition": 3, "offset": 12, "part": 4},
        "timezone": "America/New_York"}, max_records_per_object=10)).archives[0].layout
    assert [d.kind for d in lay.partition_by] == ["time", "value", "header"]
    assert lay.padding.offset == 12 and lay.timezone == "America/New_York"


def test_rotation_requires_part_in_the_template():
    lines = error_lines(error_of(config(layout={"template": "{{topic}}/{{partition}}/{{start_offset}}"},
                                        max_records_per_object=100)))
    assert lines == ["archives[0]: layout.template: the key template '{{topic}}/{{partition}}/{{start_offset}}' "
                     "must contain {{part}}: rotation (max_records_per_object / max_bytes_per_object) splits a "
                     "window into parts, and without it two parts would get the same key"]
    # without rotation the same template is fine
    assert parse_settings(config(layout={"template": "{{topic}}/{{partition}}/{{start_offset}}"})).archives[0].layout


def test_layout_errors_name_the_key_path():
    msg = error_of(config(layout={"partition_by": [{"kind": "time", "timezone": "Nowhere/Land"}]}))
    assert "archives[0].layout.partition_by[0].time.timezone: not an IANA time zone: 'Nowhere/Land'" in msg
    msg = error_of(config(layout={"template": "{{topic}}{{partition}}/{{start_offset}}"}))
    assert "archives[0].layout: the key template '{{topic}}{{partition}}/{{start_offset}}' is ambiguous" in msg
