import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from s3_archive.keys.template import (
    DEFAULT_TEMPLATE,
    MAX_PART,
    UNITS,
    InvalidTemplate,
    KeyTemplate,
    Padding,
    Placeholder,
    check_template,
    parse_key,
    parse_template,
    render_key,
    slot_regex,
)
from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def all_parses(t: KeyTemplate, name: str) -> list[tuple[str, ...]]:
    """Every way to split `name` by the template (exhaustive; the reference for the static ambiguity check)."""
    out: list[tuple[str, ...]] = []
    parts = [re.compile(slot_regex(t, p)) if isinstance(p, Placeholder) else p for p in t.parts]

    def go(i: int, pos: int, acc: tuple[str, ...]) -> None:
        if i == len(parts):
            if pos == len(name):
                out.append(acc)
            return
        part = parts[i]
        if isinstance(part, str):
            if name.startswith(part, pos):
                go(i + 1, pos + len(part), acc)
            return
        for end in range(pos, len(name) + 1):
            if part.fullmatch(name, pos, end):
                go(i + 1, end, acc + (name[pos:end],))

    go(0, 0, ())
    return out


def accepted(text: str, padding: Padding | None = None, rotation: bool = False, segments: int = 1,
             record_slots: tuple[str, ...] = ()) -> KeyTemplate:
    t = parse_template(text, padding, segments)
    check_template(t, rotation=rotation, record_slots=record_slots)
    return t


def refused(text: str, padding: Padding | None = None, rotation: bool = False, segments: int = 1,
            record_slots: tuple[str, ...] = ()) -> str:
    with pytest.raises(InvalidTemplate) as e:
        accepted(text, padding, rotation, segments, record_slots)
    return str(e.value)


# --- known keys ---------------------------------------------------------------------------------------------------


def test_default_template_renders_todays_key():
    t = accepted(DEFAULT_TEMPLATE, rotation=True)
    values = {"topic": "orders", "partition_by": "kafka_partition=3", "partition": 3, "start_offset": 1000,
              "end_offset": 2000, "part": 1}
    key = render_key(t, values)
    assert key == "orders/kafka_partition=3/orders+3+0000000000000001000-0000000000000002000+00001"
    assert parse_key(t, key) == values


def test_aiven_padding_true_widths():
    t = accepted("{{topic}}/{{partition:padding=true}}/{{start_offset:padding=true}}", Padding(type="none"))
    assert render_key(t, {"topic": "t", "partition": 7, "start_offset": 42}) == \
        "t/0000000007/00000000000000000042"


def test_aiven_default_template_unpadded_parses_from_the_right():
    # '-' may occur in a topic, but not in the numbers after it, so the topic takes what is left
    t = accepted("{{topic}}-{{partition}}-{{start_offset}}", Padding(type="none"))
    key = render_key(t, {"topic": "customer-topic-1", "partition": 10, "start_offset": 112})
    assert key == "customer-topic-1-10-112"
    assert parse_key(t, key) == {"topic": "customer-topic-1", "partition": 10, "start_offset": 112}


def test_timestamp_units_and_the_YYYY_alias():
    t = accepted("{{topic}}/{{timestamp:unit=YYYY}}/{{timestamp:unit=MM}}{{timestamp:unit=dd}}-"
                 "{{timestamp:unit=HH}}/{{partition}}+{{start_offset}}")
    assert t.slots == ("topic", "timestamp:yyyy", "timestamp:MM", "timestamp:dd", "timestamp:HH", "partition",
                       "start_offset")
    v = {"topic": "a", "timestamp:yyyy": "2024", "timestamp:MM": "03", "timestamp:dd": "31", "timestamp:HH": "02",
         "partition": 0, "start_offset": 5}
    assert render_key(t, v) == "a/2024/0331-02/0+0000000000000000005"
    assert parse_key(t, render_key(t, v)) == v


def test_lenses_padding_right_and_custom_char():
    t = accepted("{{topic}}/{{partition}}/{{start_offset}}", Padding(type="right", char="x", partition=4, offset=6))
    assert render_key(t, {"topic": "t", "partition": 12, "start_offset": 1234567}) == "t/12xx/1234567"
    assert parse_key(t, "t/12xx/1234567") == {"topic": "t", "partition": 12, "start_offset": 1234567}
    t = accepted("{{topic}}/{{partition}}/{{start_offset}}", Padding(type="left", char="_", partition=3, offset=0))
    assert render_key(t, {"topic": "t", "partition": 5, "start_offset": 0}) == "t/__5/0"


def test_a_placeholder_used_twice_must_agree_when_parsed():
    t = accepted("{{topic}}/{{partition}}/{{topic}}+{{partition}}+{{start_offset}}")
    assert parse_key(t, "a/1/a+1+0000000000000000009")["partition"] == 1
    with pytest.raises(ValueError, match="appears twice"):
        parse_key(t, "a/1/b+1+0000000000000000009")


@pytest.mark.parametrize("key", [
    "orders/kafka_partition=3/orders+3+000000000000001000-0000000000000002000+00001",  # 18-digit start
    "orders/kafka_partition=3/orders+03+0000000000000001000-0000000000000002000+00001",  # padded partition
    "orders/kafka_partition=3/orders+3+0000000000000001000-0000000000000002000+00001.parquet",
    "orders/kafka_partition=3/orders+3+0000000000000001000_0000000000000002000+00001",
])
def test_parse_refuses_keys_the_template_does_not_write(key):
    t = accepted(DEFAULT_TEMPLATE)
    with pytest.raises(ValueError):
        parse_key(t, key)


def test_render_refuses_bad_values():
    t = accepted(DEFAULT_TEMPLATE, rotation=True)
    good = {"topic": "o", "partition_by": "kafka_partition=3", "partition": 3, "start_offset": 1, "end_offset": 2,
            "part": 0}
    with pytest.raises(ValueError, match="part number must be in 0..99999"):
        render_key(t, {**good, "part": 100_000})
    with pytest.raises(ValueError, match="int >= 0"):
        render_key(t, {**good, "partition": -1})
    with pytest.raises(ValueError, match="cannot render"):
        render_key(t, {**good, "topic": "a/b"})
    with pytest.raises(KeyError, match="no value for"):
        render_key(t, {k: v for k, v in good.items() if k != "end_offset"})


# --- refusals -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, kwargs, message", [
    ("", {}, "the key template is empty"),
    ("/{{topic}}/{{partition}}/{{start_offset}}", {}, "must not start with '/'"),
    ("{{topic}}//{{partition}}/{{start_offset}}", {}, "empty path segment"),
    ("{{topic}}/{{partition}}/{{start_offset}}/{{foo}}", {}, "unknown placeholder {{foo}}"),
    ("{{topic}}/{{partition}}/{{start_offset}}/{{timestamp}}", {}, "needs unit=yyyy|MM|dd|HH"),
    ("{{topic}}/{{partition}}/{{start_offset}}/{{timestamp:unit=ss}}", {}, "got unit=ss"),
    ("{{topic:padding=true}}/{{partition}}/{{start_offset}}", {}, "padding applies to"),
    ("{{topic}}/{{partition:padding=yes}}/{{start_offset}}", {}, "padding must be true or false"),
    ("{{topic}}/{{partition:width=3}}/{{start_offset}}", {}, "unknown parameter(s) ['width']"),
    ("{{topic}}/{{partition}}/{{start_offset}}/{{key:x=1}}", {}, "it takes none"),
    ("{{topic}}/{{partition}}/{{start_offset}}/{{key}", {}, "unclosed '{{'"),
    ("{{topic}}/{{partition}}/{{start_offset}}\\x", {}, "'\\\\'"),
    ("{{partition}}/{{start_offset}}", {}, "must contain {{topic}}"),
    ("{{topic}}/{{start_offset}}", {}, "must contain {{partition}}"),
    ("{{topic}}/{{partition}}/{{end_offset}}", {}, "must contain {{start_offset}}"),
    ("{{topic}}/{{partition}}/{{start_offset}}", {"rotation": True}, "must contain {{part}}"),
    ("{{topic}}/{{partition}}/{{start_offset}}", {"record_slots": ("partition_by",)}, "must contain {{partition_by}}"),
    ("{{topic}}/{{partition_by}}/{{partition}}/{{start_offset}}", {"segments": 0}, "partition_by is empty"),
    # two variable fields touching, or a separator that can occur inside them
    ("{{topic}}/{{partition}}{{start_offset}}", {"padding": Padding(type="none")}, "ambiguous"),
    ("{{topic}}-{{partition}}-{{start_offset}}-{{key}}", {}, "the end of {{topic}} and the start of {{key}}"),
    ("{{topic}}.{{key}}/{{partition}}/{{start_offset}}", {}, "ambiguous"),
    ("{{topic}}/{{partition}}/{{start_offset}}/{{key}}-{{key}}", {}, "ambiguous"),
    ("{{topic}}/{{key}}{{partition_by}}/{{partition}}/{{start_offset}}", {}, "ambiguous"),
    ("{{topic}}/{{partition}}x{{start_offset}}x{{part}}", {"padding": Padding(type="right", char="x", offset=2,
                                                                                  part=1)}, "ambiguous"),
])
def test_refused_templates_say_why(text, kwargs, message):
    assert message in refused(text, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"char": "/"}, "padding.char must be one of"),
    ({"char": "5"}, "cannot be told apart"),
    ({"char": "0", "type": "right"}, "cannot be told apart"),
    ({"char": "ab"}, "at most 1 character"),
])
def test_bad_padding(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Padding(**kwargs)


def test_a_separator_that_may_occur_in_the_key_partition_by_is_fine_when_the_next_field_starts_cleanly():
    t = accepted("{{topic}}/{{partition_by}}={{key}}/{{partition}}/{{start_offset}}")
    v = {"topic": "t", "partition_by": "kafka_partition=3", "key": "a-b", "partition": 3, "start_offset": 1}
    assert render_key(t, v) == "t/kafka_partition=3=a-b/3/0000000000000000001"
    assert parse_key(t, render_key(t, v)) == v


def test_a_separator_is_found_by_any_character_the_placeholder_cannot_contain_not_only_its_first():
    # '-' and '.' may occur in a topic, '/' not: the topic ends where the literal's '/' is, less one
    t = accepted("{{topic}}-/.{{key}}-/.{{partition}}/{{start_offset}}")
    v = {"topic": "a-.b", "key": "k-.", "partition": 1, "start_offset": 2}
    key = render_key(t, v)
    assert key == "a-.b-/.k-.-/.1/0000000000000000002"
    assert parse_key(t, key) == v
    assert len(all_parses(t, key)) == 1


def test_fixed_width_numbers_may_touch():
    t = accepted("{{topic}}/{{partition:padding=true}}{{start_offset}}{{end_offset}}{{part}}", rotation=True)
    v = {"topic": "t", "partition": 12, "start_offset": 3, "end_offset": 4, "part": 2}
    assert parse_key(t, render_key(t, v)) == v


# --- property: every accepted template round-trips every value ------------------------------------------------------

PIECES = ["{{topic}}", "{{partition}}", "{{start_offset}}", "{{end_offset}}", "{{part}}", "{{key}}",
          "{{partition_by}}", "{{timestamp:unit=yyyy}}", "{{timestamp:unit=HH}}", "{{partition:padding=true}}",
          "{{start_offset:padding=true}}"]
SEPARATORS = ["/", "+", "-", "_", ".", "", "=", "x", "~", "/p=", "+v"]
paddings = st.builds(
    Padding, type=st.sampled_from(["left", "right", "none"]), char=st.sampled_from(["x", "_", "-"]),
    partition=st.integers(0, 6), offset=st.sampled_from([0, 3, 12, 19, 20]), part=st.integers(0, 6),
) | st.builds(Padding, type=st.just("left"), char=st.just("0"), partition=st.integers(0, 6),
              offset=st.sampled_from([0, 12, 19]), part=st.integers(0, 6))

encoded = st.from_regex(r"[A-Za-z0-9%()._-]{1,12}", fullmatch=True)
topics = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True)


@st.composite
def templates(draw):
    body = draw(st.lists(st.sampled_from(PIECES[3:]), max_size=4))
    fields = draw(st.permutations(["{{topic}}", "{{partition}}", "{{start_offset}}", *body]))
    seps = [draw(st.sampled_from(SEPARATORS)) for _ in range(len(fields) + 1)]
    text = seps[0].lstrip("/") + "".join(f + s for f, s in zip(fields, seps[1:], strict=True))
    return text.replace("//", "/")


def values_for(draw, t: KeyTemplate) -> dict:
    v: dict[str, object] = {}
    for p in t.placeholders:
        if p.slot in v:
            continue
        v[p.slot] = {
            "topic": lambda: draw(topics),
            "partition": lambda: draw(st.integers(0, MAX_PARTITION)),
            "start_offset": lambda: draw(st.integers(0, MAX_OFFSET)),
            "end_offset": lambda: draw(st.integers(0, MAX_OFFSET)),
            "part": lambda: draw(st.integers(0, MAX_PART)),
            "key": lambda: draw(encoded),
            "partition_by": lambda: "/".join(draw(st.lists(encoded, min_size=t.path_segments,
                                                           max_size=t.path_segments))),
            "timestamp": lambda: draw(st.from_regex(rf"[0-9]{{{UNITS[p.unit]}}}", fullmatch=True)),
        }[p.name]()
    return v


@FAST
@given(st.data(), templates(), paddings, st.integers(1, 3))
def test_accepted_templates_round_trip(data, text, padding, segments):
    try:
        t = accepted(text, padding, segments=segments)
    except InvalidTemplate:
        assume(False)
    v1 = values_for(data.draw, t)
    key = render_key(t, v1)
    assert parse_key(t, key) == v1
    assert len(all_parses(t, key)) == 1  # the static check agrees with the exhaustive reference
    # injective: different values never give the same key
    v2 = values_for(data.draw, t)
    assert (render_key(t, v2) == key) == (v1 == v2)


@FAST
@given(templates(), paddings)
def test_slash_separated_placeholders_are_always_accepted(text, padding):
    t = parse_template(text, padding)
    spaced = "/".join(str(p) for p in t.placeholders)
    check_template(parse_template(spaced, padding), rotation=False)
