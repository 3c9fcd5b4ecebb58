"""The Aiven dialect of the key engine (`file.name.template`): parse, check, render, parse back."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from s3_archive.keys.foreign_keys import (
    AIVEN,
    NameOutOfRange,
    aiven_parse,
    aiven_render,
    aiven_template,
    confluent_parse,
    lenses_parse,
)
from s3_archive.keys.template import InvalidTemplate, Placeholder, parse_template
from s3_archive_tests.unit.keys.test_template import all_parses

VARS = [Placeholder("topic"), Placeholder("key"), Placeholder("partition"),
        Placeholder("partition", aiven_padding=True), Placeholder("start_offset"),
        Placeholder("start_offset", aiven_padding=True),
        Placeholder("timestamp", unit="yyyy"), Placeholder("timestamp", unit="MM"), Placeholder("timestamp", unit="dd"),
        Placeholder("timestamp", unit="HH")]
literals = st.text(alphabet="-_/.+=a0", max_size=3)


@st.composite
def templates(draw) -> str:
    chosen = draw(st.lists(st.sampled_from(VARS), min_size=1, max_size=4, unique_by=str))
    # at most one of each placeholder name (timestamp units excepted), as the Aiven dialect requires
    names = [p.name for p in chosen if p.name != "timestamp"]
    assume(len(names) == len(set(names)))
    parts = [draw(literals)]
    for p in chosen:
        parts += [str(p), draw(literals)]
    return "".join(parts)


topics = st.text(alphabet="ab-._1", min_size=1, max_size=6)
keys = st.text(alphabet="ab-/_1+", max_size=5)
moments = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC))


@settings(max_examples=400, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(templates(), topics, st.integers(0, 10**5 - 1), st.integers(0, 2**63 - 1), moments, keys)
def test_accepted_templates_round_trip_and_have_exactly_one_parse(text, topic, partition, offset, ts, key):
    try:
        t = aiven_template(text)
    except InvalidTemplate:
        return
    name = aiven_render(t, topic, partition, offset, ts, key)
    assert len(all_parses(t, name)) == 1, (text, name, all_parses(t, name))
    got = aiven_parse(t, name)
    assert got is not None, (text, name)
    want = {"topic": topic, "partition": partition, "start_offset": offset, "key": key}
    for p in t.placeholders:
        if p.name == "timestamp":
            assert got["timestamp"][p.unit] == {"yyyy": ts.year, "MM": ts.month, "dd": ts.day, "HH": ts.hour}[p.unit]
        else:
            assert got[p.name] == want[p.name]


@pytest.mark.parametrize("text, name", [
    ("{{partition}}{{start_offset}}", "1234"),
    ("{{topic}}{{partition}}-{{start_offset}}", "t12-3"),
    ("{{topic}}-{{key}}", "a-b-c"),
    ("{{key}}-{{topic}}", "a-b-c"),
    ("{{topic}}-{{partition}}-{{start_offset}}-{{key}}", "a-1-2-3-4"),
    ("{{topic}}{{start_offset:padding=false}}", "t123"),
])
def test_ambiguous_templates_are_refused_and_really_are_ambiguous(text, name):
    with pytest.raises(InvalidTemplate, match="ambiguous"):
        aiven_template(text)
    # The same template without the check (parse_template is syntax only): the name splits in more than one way.
    assert len(all_parses(parse_template(text, dialect=AIVEN), name)) > 1


@pytest.mark.parametrize("text", [
    "{{topic}}-{{partition}}-{{start_offset}}",  # Aiven's default: the topic may contain '-'
    "{{topic}}/{{partition}}/{{start_offset}}",
    "topic/{{topic}}/partition/{{partition}}/startOffset/{{start_offset}}",
    "{{topic}}-{{partition:padding=true}}{{start_offset:padding=true}}",
    "{{timestamp:unit=yyyy}}/{{timestamp:unit=MM}}/{{timestamp:unit=dd}}/{{topic}}-{{partition}}-{{start_offset}}",
    "{{key}}",
    "{{topic}}/{{key}}",
    # literals are the sink's as they are: a leading '/', '//', single braces
    "/{x}//{{ topic }}-{{partition : padding = true}}-{{start_offset}}",
])
def test_usual_templates_are_accepted(text):
    aiven_template(text)


@pytest.mark.parametrize("text, message", [
    ("{{topik}}-{{partition}}", "unknown placeholder {{topik}}"),
    ("{{end_offset}}-{{partition}}", "unknown placeholder {{end_offset}}"),
    ("{{timestamp}}", "needs unit="),
    ("{{timestamp:unit=mm}}", "needs unit=yyyy|MM|dd|HH, got unit=mm"),
    ("{{timestamp:unit=YYYY}}", "needs unit=yyyy|MM|dd|HH, got unit=YYYY"),  # our layouts' alias, not Aiven's
    ("{{partition:padding=yes}}", "padding must be true or false, got 'yes'"),
    ("{{partition:padding=true,}}", "padding must be true or false, got 'true,'"),  # one name=value only
    ("{{partition:}}", "parameter '' must be name=value"),
    ("{{topic:padding=true}}", "padding applies to {{partition}}, {{start_offset}} only"),
    ("{{topic}}-{{topic}}", "appears twice"),
    ("{{partition}}-{{partition:padding=true}}", "appears twice"),
    ("{{topic}-{{partition}}", "malformed placeholder"),
])
def test_malformed_templates_name_the_problem(text, message):
    with pytest.raises(InvalidTemplate, match=re.escape(message)) as e:
        aiven_template(text)
    assert f"file.name.template {text!r}" in str(e.value)


def test_aiven_examples_parse_like_the_source_connector_docs():
    t = aiven_template("{{topic}}-{{partition}}-{{start_offset}}")
    assert aiven_parse(t, "customer-topic-1-1734445664111") == {"topic": "customer-topic", "partition": 1,
                                                                "start_offset": 1734445664111}
    padded = aiven_template("{{topic}}-{{partition:padding=true}}-{{start_offset:padding=true}}")
    assert aiven_render(padded, "t", 7, 42) == "t-0000000007-00000000000000000042"
    assert aiven_parse(t, "t-01-5") is None  # no leading zeros without padding (Java's Long.toString)


def test_timestamps_render_from_a_datetime_and_parse_to_unit_values():
    t = aiven_template("{{timestamp:unit=yyyy}}/{{timestamp:unit=MM}}/{{topic}}-{{partition}}-{{start_offset}}")
    name = aiven_render(t, "t", 1, 2, datetime(2024, 3, 9, 5, tzinfo=UTC))
    assert name == "2024/03/t-1-2"
    assert aiven_parse(t, name) == {"timestamp": {"yyyy": 2024, "MM": 3}, "topic": "t", "partition": 1,
                                    "start_offset": 2}


def test_a_key_is_any_text():
    t = aiven_template("{{topic}}/{{key}}")
    for key in ("", "a/b+c", "ü\n{"):
        assert aiven_parse(t, aiven_render(t, "t", key=key)) == {"topic": "t", "key": key}


@pytest.mark.parametrize("name, message", [
    ("t-2147483648-0", "partition 2147483648 is beyond 2147483647, Kafka's largest partition"),
    ("t-0-9223372036854775808", "start offset 9223372036854775808 is beyond 9223372036854775807, Kafka's largest "
                                "offset"),
    ("t-0-99999999999999999999", "start offset 99999999999999999999 is beyond"),
])
def test_the_parsers_refuse_numbers_beyond_kafkas_ranges_themselves(name, message):
    with pytest.raises(NameOutOfRange, match=re.escape(message)):
        aiven_parse(aiven_template("{{topic}}-{{partition}}-{{start_offset}}"), name)
    _, partition, start = name.split("-")
    confluent = f"t/partition={partition}/t+{partition}+{start}.avro"
    with pytest.raises(NameOutOfRange, match=re.escape(message)):
        confluent_parse("t", "avro", False, confluent)
    with pytest.raises(NameOutOfRange, match=re.escape(message)):
        lenses_parse("t", "avro", False, f"t/{partition}/{start}.avro")
    # The largest numbers Kafka has still parse: which of them a restore can use is the planner's business.
    assert aiven_parse(aiven_template("{{topic}}-{{partition}}-{{start_offset}}"),
                       "t-2147483647-9223372036854775807") == {
        "topic": "t", "partition": 2147483647, "start_offset": 9223372036854775807}
    got = confluent_parse("t", "avro", False, "t/partition=2147483647/t+2147483647+9223372036854775807.avro")
    assert (got.partition, got.offset, got.kind) == (2147483647, 9223372036854775807, "values")
    got = lenses_parse("t", "avro", False, "t/2147483647/9223372036854775807.avro")
    assert (got.partition, got.offset) == (2147483647, 9223372036854775807)
