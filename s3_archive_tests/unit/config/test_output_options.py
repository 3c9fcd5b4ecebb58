"""Envelope selection, value decoding and rotation options: config validation and the pure helpers."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from s3_archive.archive.driver.output import Output
from s3_archive.archive.driver.spark_job import variant_schema_to_ddl
from s3_archive.model.formats import ENVELOPE_COLUMNS, envelope_columns, parse_ddl_fields
from s3_archive_tests.unit.config.parsed import cfg, err


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_envelope_columns_keep_envelope_order(k, v, h, m):
    cols = envelope_columns(key=k, value=v, headers=h, metadata=m)
    order = [c for c, _ in ENVELOPE_COLUMNS]
    assert cols == [c for c in order if c in cols]
    assert ("key" in cols) == k and ("value" in cols) == v and ("headers" in cols) == h
    assert all((c in cols) == m for c in ("topic", "partition", "offset", "timestamp", "timestamp_type"))


def test_default_is_the_whole_envelope_and_restorable():
    c = cfg()
    assert c.envelope.columns() == [c for c, _ in ENVELOPE_COLUMNS]
    assert c.restorable
    assert Output.of(c).columns == tuple(c.envelope.columns())


def test_partial_envelope_is_not_restorable():
    c = cfg(envelope={"headers": False})
    assert "headers" not in c.envelope.columns() and not c.restorable


def test_utf8_value_is_not_restorable_but_json_keeps_the_raw_value():
    assert not cfg(value_decoding={"type": "utf8"}).restorable
    assert cfg(value_decoding={"type": "json"}).restorable
    assert not cfg(value_decoding={"type": "json"}, envelope={"value": False}).restorable


def test_empty_envelope_rejected():
    msg = err(envelope={"key": False, "value": False, "headers": False, "metadata": False})
    assert "every part is off" in msg


def test_envelope_only_for_envelope_formats():
    msg = err(format="csv", envelope={"key": False})
    assert "envelope applies to formats" in msg and "'csv'" in msg and "csv_fields" in msg


def test_decoding_needs_a_column_format():
    msg = err(format="text", value_decoding={"type": "json"})
    assert "value_decoding.type 'json'" in msg and "parquet" in msg


def test_json_schema_only_for_json():
    assert "json_schema applies to type 'json' only" in err(value_decoding={"type": "utf8", "json_schema": "a INT"})
    assert "column_prefix applies to types json, avro, protobuf, json_schema, not 'utf8'" in err(
        value_decoding={"type": "utf8", "column_prefix": "v_"})


def test_json_schema_clash_with_envelope_names_the_fields():
    msg = err(value_decoding={"type": "json", "json_schema": "key STRING, offset BIGINT, x INT"})
    assert "['key', 'offset']" in msg and "column_prefix" in msg
    c = cfg(value_decoding={"type": "json", "json_schema": "key STRING, x INT", "column_prefix": "v_"})
    assert c.value_decoding.column_prefix == "v_"


def test_json_schema_shape_checked_at_load():
    assert "needs a name and a type" in err(value_decoding={"type": "json", "json_schema": "id"})
    assert "unbalanced" in err(value_decoding={"type": "json", "json_schema": "s STRUCT<a: INT"})
    assert "named twice" in err(value_decoding={"type": "json", "json_schema": "a INT, a STRING"})


def test_unknown_decoding_and_policy_name_allowed_values():
    msg = err(value_decoding={"type": "thrift"})
    assert "'bytes'" in msg and "'utf8'" in msg and "'json'" in msg and "'avro'" in msg and "'json_schema'" in msg
    assert "'dead_letter'" in err(value_decoding={"on_error": "drop"}) and "'skip'" in err(
        value_decoding={"on_error": "drop"})


def test_bytes_format_has_no_rotation():
    assert "one object per record" in err(format="bytes", max_records_per_object=10)


def test_byte_cap_minimum():
    assert "max_bytes_per_object" in err(max_bytes_per_object=10)
    assert cfg(max_bytes_per_object=1 << 20).max_bytes_per_object == 1 << 20


@pytest.mark.parametrize("ddl,names", [
    ("id BIGINT", ["id"]),
    ("id BIGINT, name STRING", ["id", "name"]),
    ("s STRUCT<a: INT, b: ARRAY<STRING>>, m MAP<STRING, INT>, d DECIMAL(10, 2)", ["s", "m", "d"]),
    ("`a b` STRING, `x,y` INT", ["a b", "x,y"]),
    ("a: INT", ["a"]),
])
def test_parse_ddl_fields(ddl, names):
    assert parse_ddl_fields(ddl) == names


@pytest.mark.parametrize("schema,ddl", [
    ("OBJECT<a: BIGINT, b: STRING>", "STRUCT<a: BIGINT, b: STRING>"),
    ("OBJECT<a: VARIANT, e: VOID, c: OBJECT<d: ARRAY<VARIANT>>>", "STRUCT<a: STRING, e: STRING, c: STRUCT<d: ARRAY<STRING>>>"),
    ("OBJECT<`VARIANT`: BIGINT>", "STRUCT<`VARIANT`: BIGINT>"),
])
def test_variant_schema_to_ddl(schema, ddl):
    assert variant_schema_to_ddl(schema) == ddl


def test_error_policies_fit_together():
    field_layout = {"template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
                    "partition_by": [{"kind": "value", "field": "region"}]}
    assert cfg(layout={**field_layout, "on_missing": "skip"}).layout.missing_segments == (0,)
    assert "never lacks a value" in err(layout={"on_missing": "skip"})
    assert "no record becomes a dead letter" in err(dead_letter_topic="dlq")
    assert cfg(value_decoding={"type": "utf8", "on_error": "dead_letter"},
               dead_letter_topic="{topic}.dlq").dead_letter_topic_for("orders") == "orders.dlq"
    assert "not a valid Kafka topic name" in err(value_decoding={"type": "utf8", "on_error": "dead_letter"},
                                                 dead_letter_topic="bad topic")
    assert "does not apply to format 'iceberg'" in err(format="iceberg",
                                                      value_decoding={"type": "json", "on_error": "skip"})


def test_retries_freshness_and_consumer_group_are_checked():
    assert "retries.max" in err(retries={"max": 11}) and "retries.backoff_seconds" in err(
        retries={"backoff_seconds": -1})
    assert "not a usable Kafka consumer group id" in err(consumer_group="has space")
    assert cfg().group_id == "s3-archive.a" and cfg(consumer_group="lag").group_id == "lag"
    assert cfg(consumer_group_offsets=False).group_id is None
    assert "freshness_factor" in err(freshness_factor=0.5) and "sensor_interval_seconds" in err(
        sensor_interval_seconds=1)


# --- sink-compatible output --------------------------------------------------------------------------------------

def test_sink_output_is_lossy_but_a_header_row_or_a_level_is_not():
    assert not cfg(format="jsonl", sink_output={"value": "json"}).restorable
    assert not cfg(sink_output={"skip_tombstones": True}).restorable
    assert cfg(compression="brotli", compression_level=11).restorable
    assert cfg(format="jsonl", compression="gzip", compression_level=1).restorable
    o = Output.of(cfg(format="csv", csv_fields=["key", "value"], compression="zstd", compression_level=22,
                      sink_output={"value": "text", "csv_header": True, "skip_tombstones": True}))
    assert (o.value_as, o.csv_header, o.skip_tombstones, o.codec_level) == ("text", True, True, 22)


@pytest.mark.parametrize("kw, message", [
    ({"format": "parquet", "sink_output": {"value": "json"}}, "sink_output.value: json applies to formats jsonl "
                                                              "and json, not 'parquet'"),
    ({"format": "jsonl", "sink_output": {"value": "text"}}, "sink_output.value: text applies to format csv"),
    ({"format": "jsonl", "envelope": {"value": False}, "sink_output": {"value": "json"}}, "envelope.value is off"),
    ({"format": "csv", "csv_fields": ["value", "key"], "sink_output": {"value": "text"}},
     "needs value as the last of csv_fields"),
    ({"format": "jsonl", "sink_output": {"csv_header": True}}, "sink_output.csv_header applies to format csv"),
    ({"format": "iceberg", "sink_output": {"skip_tombstones": True}}, "does not apply to format 'iceberg'"),
    ({"compression": "snappy", "compression_level": 3}, "codec 'snappy' of format 'parquet' takes no level"),
    ({"format": "jsonl", "compression": "gzip", "compression_level": 10}, "gzip takes 1-9, got 10"),
    ({"compression": "brotli", "compression_level": 12}, "brotli takes 0-11, got 12"),
    ({"format": "jsonl", "compression_level": 3}, "codec 'none' of format 'jsonl' takes no level"),
    ({"sink_output": {"value": "hex"}}, "sink_output.value"),
])
def test_sink_output_options_are_checked(kw, message):
    assert message in err(**kw)


def test_retention_lock_and_verify_are_checked():
    assert cfg(retention_lock={"mode": "compliance", "days": 365}).retention_lock.s3_mode == "COMPLIANCE"
    assert "retention_lock.mode" in err(retention_lock={"mode": "legal", "days": 1})
    assert "retention_lock.days" in err(retention_lock={"mode": "governance", "days": 0})
    assert "retention_lock does not apply to format 'iceberg'" in err(
        format="iceberg", retention_lock={"mode": "governance", "days": 1})
    assert cfg().verify.bytes_per_run == 10 << 30 and "verify.period_days" in err(verify={"period_days": 0})
