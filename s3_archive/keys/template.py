"""Object key templates (Aiven `file.name.template` placeholders, Lenses padding). Pure: check, render, parse back.

    {{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-{{end_offset}}+{{part}}   (the default)

Placeholders: `{{topic}}`, `{{partition}}`, `{{start_offset}}`, `{{end_offset}}`, `{{part}}` (rotation part number),
`{{timestamp:unit=yyyy|MM|dd|HH}}` (the record's Kafka timestamp in the layout's timezone), `{{key}}` (the record
key, encoded), `{{partition_by}}` (the partition_by path). Numbers take `:padding=true` (Aiven widths: partition 10,
offsets 20, part 5) or the `Padding` config (Lenses: type, char, length per field).

A template is accepted only if every key it renders parses back to the same values, so two windows (or two
buckets or parts of one window) can never share a key. `check_template` says why a template is refused.

"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION

NUMBERS = ("partition", "start_offset", "end_offset", "part")
NAMES = (*NUMBERS, "topic", "timestamp", "key", "partition_by")
UNITS = {"yyyy": 4, "MM": 2, "dd": 2, "HH": 2}  # width of each timestamp unit
UNIT_ALIASES = {"YYYY": "yyyy"}  # Aiven reads YYYY as yyyy (the calendar year, not Java's week year)
AIVEN_WIDTHS = {"partition": 10, "start_offset": 20, "end_offset": 20, "part": 5}
MAX_PART = 99_999
MAX_DIGITS = {"partition": len(str(MAX_PARTITION)), "start_offset": len(str(MAX_OFFSET)),
              "end_offset": len(str(MAX_OFFSET)), "part": len(str(MAX_PART))}
DEFAULT_TEMPLATE = "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-{{end_offset}}+{{part}}"

DIGITS = frozenset("0123456789")
TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
# What values.encode_value can produce: unreserved characters, %XX escapes and the (null)/(empty)/(hex) tokens.
ENCODED_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-%()")
# One segment of the partition_by path: encoded values, `name=`, path_format literals.
PATH_SEGMENT_CHARS = ENCODED_CHARS | {"="}

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
_BAD_LITERAL = re.compile(r"[\x00-\x1f\x7f\\{}]")


class InvalidTemplate(ValueError):
    """The template is malformed or could give two objects the same key; the message says which and why."""


class Padding(BaseModel):
    """Lenses-style padding of the numbers in a key (`padding.type`, `padding.char`, `padding.length.*`).

    The defaults are today's layout: offsets 19 digits, part 5, partition unpadded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["left", "right", "none"] = "left"
    char: str = Field(default="0", min_length=1, max_length=1)
    partition: int = Field(default=0, ge=0, le=32)
    offset: int = Field(default=19, ge=0, le=32, description="start_offset and end_offset")
    part: int = Field(default=5, ge=0, le=32)

    @model_validator(mode="after")
    def _char(self) -> Padding:
        c = self.char
        if self.type == "none":
            return self
        if c not in TOPIC_CHARS:
            raise ValueError(f"padding.char must be one of a-z A-Z 0-9 . _ -, got {c!r}")
        if c in DIGITS and not (c == "0" and self.type == "left"):
            raise ValueError(f"padding.char {c!r} with padding.type {self.type!r} cannot be told apart from the "
                             "number's own digits; use '0' with type 'left', or a non-digit character")
        return self

    def width(self, name: str) -> int:
        if self.type == "none":
            return 0
        return {"partition": self.partition, "start_offset": self.offset, "end_offset": self.offset,
                "part": self.part}[name]


@dataclass(frozen=True)
class Placeholder:
    name: str  # one of NAMES
    unit: str | None = None  # timestamp only
    aiven_padding: bool = False  # `:padding=true`

    @property
    def slot(self) -> str:
        """The name of this placeholder's value in render/parse dicts: `timestamp:yyyy` for a unit."""
        return f"timestamp:{self.unit}" if self.name == "timestamp" else self.name

    def __str__(self) -> str:
        if self.name == "timestamp":
            return f"{{{{timestamp:unit={self.unit}}}}}"
        return f"{{{{{self.name}{':padding=true' if self.aiven_padding else ''}}}}}"


@dataclass(frozen=True)
class KeyTemplate:
    text: str
    parts: tuple[str | Placeholder, ...]  # literals and placeholders, in order, no two literals adjacent
    padding: Padding
    path_segments: int = 1  # how many `/`-separated segments {{partition_by}} renders to

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        return tuple(p for p in self.parts if isinstance(p, Placeholder))

    @property
    def slots(self) -> tuple[str, ...]:
        """Value names the template uses, first appearance order, no repeats."""
        return tuple(dict.fromkeys(p.slot for p in self.placeholders))

    def width(self, p: Placeholder) -> int:
        if p.name == "timestamp":
            return UNITS[p.unit]  # type: ignore[index]
        if p.name not in NUMBERS:
            return 0
        return AIVEN_WIDTHS[p.name] if p.aiven_padding else self.padding.width(p.name)

    def pad_char(self, p: Placeholder) -> str:
        return "0" if p.aiven_padding or self.padding.type == "none" else self.padding.char

    def pad_type(self, p: Placeholder) -> str:
        return "left" if p.aiven_padding else self.padding.type


def parse_template(text: str, padding: Padding | None = None, path_segments: int = 1) -> KeyTemplate:
    """Syntax only: placeholders and units known, literals allowed. `check_template` decides if it is safe."""
    padding = padding or Padding()
    if not text:
        raise InvalidTemplate("the key template is empty")
    if text.startswith("/"):
        raise InvalidTemplate(f"the key template must not start with '/' (the archive's prefix comes first), "
                              f"got {text!r}")
    if "//" in text:
        raise InvalidTemplate(f"the key template has an empty path segment ('//'): {text!r}")
    parts: list[str | Placeholder] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        if m.start() > pos:
            parts.append(text[pos:m.start()])
        parts.append(_placeholder(m.group(1), text))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    for lit in (p for p in parts if isinstance(p, str)):
        if "{{" in lit or "}}" in lit or (bad := _BAD_LITERAL.search(lit)):
            what = "an unclosed '{{' or a stray '}}'" if ("{{" in lit or "}}" in lit) else repr(bad.group())
            raise InvalidTemplate(f"the key template {text!r} has {what} in its literal text {lit!r}")
    return KeyTemplate(text, tuple(parts), padding, path_segments)


def _placeholder(body: str, text: str) -> Placeholder:
    name, _, params = body.strip().partition(":")
    name = name.strip()
    if name not in NAMES:
        raise InvalidTemplate(f"unknown placeholder {{{{{body}}}}} in the key template {text!r}; known: "
                              + ", ".join(f"{{{{{n}}}}}" for n in NAMES))
    args: dict[str, str] = {}
    for param in filter(None, (s.strip() for s in params.split(","))) if params else ():
        k, eq, v = param.partition("=")
        if not eq:
            raise InvalidTemplate(f"placeholder {{{{{body}}}}}: parameter {param!r} must be name=value")
        args[k.strip()] = v.strip()
    if name == "timestamp":
        unit = args.pop("unit", None)
        unit = UNIT_ALIASES.get(unit, unit)  # type: ignore[arg-type]
        if unit not in UNITS:
            raise InvalidTemplate(f"placeholder {{{{{body}}}}} needs unit=" + "|".join(UNITS)
                                  + (f", got unit={unit}" if unit else ""))
        if args:
            raise InvalidTemplate(f"placeholder {{{{{body}}}}}: unknown parameter(s) {sorted(args)}; allowed: unit")
        return Placeholder("timestamp", unit=unit)
    padding = False
    if "padding" in args:
        if name not in NUMBERS:
            raise InvalidTemplate(f"placeholder {{{{{body}}}}}: padding applies to "
                                  + ", ".join(f"{{{{{n}}}}}" for n in NUMBERS) + " only")
        value = args.pop("padding")
        if value not in ("true", "false"):
            raise InvalidTemplate(f"placeholder {{{{{body}}}}}: padding must be true or false, got {value!r}")
        padding = value == "true"
    if args:
        raise InvalidTemplate(f"placeholder {{{{{body}}}}}: unknown parameter(s) {sorted(args)}"
                              + ("; allowed: padding" if name in NUMBERS else "; it takes none"))
    return Placeholder(name, aiven_padding=padding)


# --- what each placeholder can render to ---------------------------------------------------------------------


def _chars(t: KeyTemplate, p: Placeholder) -> frozenset[str]:
    if p.name in NUMBERS:
        return DIGITS | ({t.pad_char(p)} if t.width(p) else set())
    return {"timestamp": DIGITS, "topic": TOPIC_CHARS, "key": ENCODED_CHARS,
            "partition_by": PATH_SEGMENT_CHARS}[p.name]


def _fixed(t: KeyTemplate, p: Placeholder) -> int | None:
    """The exact length of every rendering, or None when it varies."""
    if p.name == "timestamp":
        return UNITS[p.unit]  # type: ignore[index]
    if p.name in NUMBERS and t.width(p) >= MAX_DIGITS[p.name]:
        return t.width(p)
    return None


def _regex(t: KeyTemplate, p: Placeholder) -> str:
    if (n := _fixed(t, p)) is not None:
        return f"({_class(_chars(t, p))}{{{n}}})"
    if p.name == "partition_by":
        seg = f"{_class(PATH_SEGMENT_CHARS)}+"
        return f"({seg}(?:/{seg}){{{t.path_segments - 1}}})"
    return f"({_class(_chars(t, p))}+)"


def _class(chars: frozenset[str]) -> str:
    return "[" + "".join(re.escape(c) for c in sorted(chars)) + "]"


# --- the safety check ----------------------------------------------------------------------------------------


def check_template(t: KeyTemplate, *, rotation: bool, record_slots: tuple[str, ...] = ()) -> None:
    """Refuse a template that could give two objects the same key, or whose keys cannot be parsed back.

    rotation: a window may be split into parts, so `{{part}}` is required.
    record_slots: values that differ between the buckets of one window (e.g. `partition_by` when a partitioner
    splits by record content); each must appear in the template.
    """
    used = {p.slot for p in t.placeholders}
    missing = [n for n in ("topic", "partition", "start_offset") if n not in used]
    if missing:
        raise InvalidTemplate(f"the key template {t.text!r} must contain " + ", ".join(f"{{{{{n}}}}}" for n in missing)
                              + ": without them two windows could get the same key")
    if rotation and "part" not in used:
        raise InvalidTemplate(f"the key template {t.text!r} must contain {{{{part}}}}: rotation "
                              "(max_records_per_object / max_bytes_per_object) splits a window into parts, and "
                              "without it two parts would get the same key")
    for slot in record_slots:
        if slot not in used:
            raise InvalidTemplate(f"the key template {t.text!r} must contain {{{{{slot}}}}}: partition_by splits a "
                                  "window into buckets by record content, and without it two buckets would get the "
                                  "same key")
    if "partition_by" in used and t.path_segments < 1:
        raise InvalidTemplate(f"the key template {t.text!r} uses {{{{partition_by}}}} but partition_by is empty")
    for p in t.placeholders:
        if p.name in NUMBERS and t.pad_type(p) == "right" and t.width(p) and t.pad_char(p) in DIGITS:
            raise InvalidTemplate(f"{p}: right padding with a digit cannot be parsed back")
    _check_delimited(t)


def _check_delimited(t: KeyTemplate) -> None:
    """Every placeholder must end where the next literal starts (left to right) or start where the previous
    literal ends (right to left); at most one placeholder in between may take whatever is left."""
    parts = t.parts
    n = len(parts)

    def ends_cleanly(i: int) -> bool:  # placeholder i's end is found scanning from the left
        p = parts[i]
        assert isinstance(p, Placeholder)
        if _fixed(t, p) is not None:
            return True
        nxt = parts[i + 1] if i + 1 < n else None
        return isinstance(nxt, str) and nxt[0] not in _chars(t, p)

    def starts_cleanly(i: int) -> bool:  # placeholder i's start is found scanning from the right
        p = parts[i]
        assert isinstance(p, Placeholder)
        if _fixed(t, p) is not None:
            return True
        prv = parts[i - 1] if i > 0 else None
        return isinstance(prv, str) and prv[-1] not in _chars(t, p)

    holes = [i for i, p in enumerate(parts) if isinstance(p, Placeholder)]
    left = 0
    while left < len(holes) and ends_cleanly(holes[left]):
        left += 1
    right = len(holes)
    while right > left and starts_cleanly(holes[right - 1]):
        right -= 1
    if right - left > 1:
        a, b = parts[holes[left]], parts[holes[right - 1]]
        raise InvalidTemplate(
            f"the key template {t.text!r} is ambiguous: the end of {a} and the start of {b} cannot be found (a "
            "separator next to them can also occur inside them, or two placeholders touch); separate them with a "
            "character they cannot contain (e.g. '/' or '+'; a topic may contain '.', '_' and '-', a key '.', '_', "
            "'-', '%', '(' and ')'), or pad the numbers to a fixed width")


# --- render and parse ----------------------------------------------------------------------------------------


def render_key(t: KeyTemplate, values: Mapping[str, object]) -> str:
    """The key for these values: numbers as int; `key`, `partition_by`, `timestamp:<unit>` as the text they
    take in the key (keys/buckets.py produces it)."""
    out = []
    for p in t.parts:
        out.append(p if isinstance(p, str) else _render_one(t, p, values))
    return "".join(out)


def _render_one(t: KeyTemplate, p: Placeholder, values: Mapping[str, object]) -> str:
    try:
        v = values[p.slot]
    except KeyError:
        raise KeyError(f"no value for {p} (the template {t.text!r} needs {', '.join(t.slots)})") from None
    if p.name in NUMBERS:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{p} must be an int >= 0, got {v!r}")
        if p.name == "part" and v > MAX_PART:
            raise ValueError(f"part number must be in 0..{MAX_PART}, got {v}; raise max_records_per_object")
        s, w = str(v), t.width(p)
        if len(s) < w:
            s = s.rjust(w, t.pad_char(p)) if t.pad_type(p) == "left" else s.ljust(w, t.pad_char(p))
        return s
    s = str(v)
    if not s or not set(s) <= _chars(t, p) | ({"/"} if p.name == "partition_by" else set()):
        raise ValueError(f"{p} cannot render {s!r}")
    if p.name == "timestamp" and len(s) != UNITS[p.unit]:  # type: ignore[index]
        raise ValueError(f"{p} must be {UNITS[p.unit]} digits, got {s!r}")  # type: ignore[index]
    if p.name == "partition_by" and s.count("/") != t.path_segments - 1:
        raise ValueError(f"{p} must have {t.path_segments} segments, got {s!r}")
    return s


def key_regex(t: KeyTemplate) -> re.Pattern[str]:
    return re.compile("".join(re.escape(p) if isinstance(p, str) else _regex(t, p) for p in t.parts))


def parse_key(t: KeyTemplate, key: str) -> dict[str, object]:
    """The values `render_key` was given (numbers as int, the rest as text); ValueError if `key` is not one this
    template renders."""
    m = key_regex(t).fullmatch(key)
    if m is None:
        raise ValueError(f"{key!r} does not match the key template {t.text!r}")
    values: dict[str, object] = {}
    for p, text in zip(t.placeholders, m.groups(), strict=True):
        v: object = text
        if p.name in NUMBERS:
            digits = text.strip(t.pad_char(p)) if t.width(p) and t.pad_char(p) != "0" else text
            if not digits or not set(digits) <= DIGITS:
                raise ValueError(f"{key!r}: {p} is {text!r}, not a number")
            v = int(digits)
        if p.slot in values and values[p.slot] != v:
            raise ValueError(f"{key!r}: {p} appears twice with different values")
        values[p.slot] = v
    if render_key(t, values) != key:  # e.g. padding that this template would not write
        raise ValueError(f"{key!r} is not a key the template {t.text!r} writes (re-rendered: "
                         f"{render_key(t, values)!r})")
    return values
