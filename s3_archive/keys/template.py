"""Object key templates: one engine that parses, checks, renders and parses back the keys of our archives and the
object names of the Aiven S3 sink (`file.name.template`). Pure.

    {{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-{{end_offset}}+{{part}}   (our default)

Placeholders: `{{topic}}`, `{{partition}}`, `{{start_offset}}`, `{{end_offset}}`, `{{part}}` (rotation part number),
`{{timestamp:unit=yyyy|MM|dd|HH}}` (the record's Kafka timestamp in the layout's timezone), `{{key}}` (the record
key, encoded), `{{partition_by}}` (the partition_by path). Numbers take `:padding=true` (Aiven widths: partition 10,
offsets 20, part 5) or the `Padding` config (Lenses: type, char, length per field); unpadded they have no leading
zeros (Java's Long.toString, Python's str).

Who writes the keys is a `Dialect`, a frozen value the template carries: which placeholders it knows, which are
required, what `{{key}}` renders to, whether a placeholder may repeat, the parameter syntax, unit aliases, whether
the template is an S3 path below a prefix (strict literals) and the default padding. `ARCHIVE` is ours;
keys/foreign_keys.py defines Aiven's. Everything else (the grammar, the character set and width of each placeholder,
the ambiguity check, rendering and parsing) is the same code for both.

A template is accepted only if every key it renders parses back to the same values, so two windows (or two
buckets or parts of one window) can never share a key. `check_template` says why a template is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION

NUMBERS = ("partition", "start_offset", "end_offset", "part")
NAMES = (*NUMBERS, "topic", "timestamp", "key", "partition_by")
UNITS = {"yyyy": 4, "MM": 2, "dd": 2, "HH": 2}  # width of each timestamp unit
UNIT_ALIASES = {"YYYY": "yyyy"}  # we read YYYY as yyyy (the calendar year, not Java's week year)
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

# A placeholder's body holds no brace, so `{{{topic}}` is the literal '{' and then {{topic}} (as Aiven reads it).
_PLACEHOLDER = re.compile(r"\{\{([^{}]*)\}\}")
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
class Dialect:
    """Who writes the keys: what a template of theirs may hold and what its placeholders render to."""

    what: str  # how messages name a template: "key template", "file.name.template"
    names: tuple[str, ...]  # the placeholders it knows (a subset of NAMES)
    required: tuple[str, ...]  # check_template: without these two objects could get the same key
    key_chars: frozenset[str] | None  # what {{key}} renders to; None: any text, also empty
    repeats: bool  # a placeholder may appear twice (parse_key: both must agree)
    param_lists: bool  # `{{name:a=1,b=2}}` (empty items skipped); False: at most one `name=value`
    unit_aliases: tuple[tuple[str, str], ...]
    paths: bool  # a path below a prefix: not empty, no leading '/', no '//', no control chars, '\\', '{', '}'
    padding: Padding  # of numbers without `:padding=true`, unless the caller gives one


ARCHIVE = Dialect(what="key template", names=NAMES, required=("topic", "partition", "start_offset"),
                  key_chars=ENCODED_CHARS, repeats=True, param_lists=True,
                  unit_aliases=tuple(UNIT_ALIASES.items()), paths=True, padding=Padding())


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
    dialect: Dialect = ARCHIVE

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


def parse_template(text: str, padding: Padding | None = None, path_segments: int = 1,
                   dialect: Dialect = ARCHIVE) -> KeyTemplate:
    """Syntax only: placeholders, parameters and units known to the dialect, literals allowed. `check_template`
    decides if it is safe."""
    d = dialect
    if d.paths:
        if not text:
            raise InvalidTemplate(f"the {d.what} is empty")
        if text.startswith("/"):
            raise InvalidTemplate(f"the {d.what} must not start with '/' (the archive's prefix comes first), "
                                  f"got {text!r}")
        if "//" in text:
            raise InvalidTemplate(f"the {d.what} has an empty path segment ('//'): {text!r}")
    parts: list[str | Placeholder] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        if m.start() > pos:
            parts.append(text[pos:m.start()])
        parts.append(_placeholder(m.group(1), text, d))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    for lit in (p for p in parts if isinstance(p, str)):
        if "{{" in lit or "}}" in lit:
            raise InvalidTemplate(f"the {d.what} {text!r} has a malformed placeholder (an unclosed '{{{{' or a "
                                  f"stray '}}}}') in its literal text {lit!r}; placeholders look like {{{{name}}}} "
                                  "or {{name:param=value}}")
        if d.paths and (bad := _BAD_LITERAL.search(lit)):
            raise InvalidTemplate(f"the {d.what} {text!r} has {bad.group()!r} in its literal text {lit!r}")
    if not d.repeats:
        seen: set[str] = set()
        for p in (p for p in parts if isinstance(p, Placeholder)):
            if p.slot in seen:
                raise InvalidTemplate(f"the {d.what} {text!r}: {p} appears twice")
            seen.add(p.slot)
    return KeyTemplate(text, tuple(parts), padding or d.padding, path_segments, d)


def _placeholder(body: str, text: str, d: Dialect) -> Placeholder:
    name, colon, params = body.strip().partition(":")
    name = name.strip()
    if name not in d.names:
        raise InvalidTemplate(f"unknown placeholder {{{{{body}}}}} in the {d.what} {text!r}; known: "
                              + ", ".join(f"{{{{{n}}}}}" for n in d.names))
    where = f"the {d.what} {text!r}: placeholder {{{{{body}}}}}"
    if d.param_lists:
        items = [s for s in (s.strip() for s in params.split(",")) if s]
    else:  # `name` or `name:param=value`, as Aiven's parser reads them
        items = [params.strip()] if colon else []
    args: dict[str, str] = {}
    for param in items:
        k, eq, v = param.partition("=")
        if not eq:
            raise InvalidTemplate(f"{where}: parameter {param!r} must be name=value")
        args[k.strip()] = v.strip()
    if name == "timestamp":
        unit = args.pop("unit", None)
        unit = dict(d.unit_aliases).get(unit, unit)  # type: ignore[arg-type]
        if unit not in UNITS:
            raise InvalidTemplate(f"{where} needs unit=" + "|".join(UNITS) + (f", got unit={unit}" if unit else ""))
        if args:
            raise InvalidTemplate(f"{where}: unknown parameter(s) {sorted(args)}; allowed: unit")
        return Placeholder("timestamp", unit=unit)
    numbers = [n for n in NUMBERS if n in d.names]
    padding = False
    if "padding" in args:
        if name not in NUMBERS:
            raise InvalidTemplate(f"{where}: padding applies to " + ", ".join(f"{{{{{n}}}}}" for n in numbers)
                                  + " only")
        value = args.pop("padding")
        if value not in ("true", "false"):
            raise InvalidTemplate(f"{where}: padding must be true or false, got {value!r}")
        padding = value == "true"
    if args:
        raise InvalidTemplate(f"{where}: unknown parameter(s) {sorted(args)}"
                              + ("; allowed: padding" if name in NUMBERS else "; it takes none"))
    return Placeholder(name, aiven_padding=padding)


# --- what each placeholder can render to ---------------------------------------------------------------------


def _chars(t: KeyTemplate, p: Placeholder) -> frozenset[str] | None:
    """The characters a rendering may hold (None: any). {{partition_by}} also holds exactly path_segments - 1
    '/', which therefore still bounds it like a character it cannot hold."""
    if p.name in NUMBERS:
        return DIGITS | ({t.pad_char(p)} if t.width(p) else set())
    return {"timestamp": DIGITS, "topic": TOPIC_CHARS, "key": t.dialect.key_chars,
            "partition_by": PATH_SEGMENT_CHARS}[p.name]


def _fixed(t: KeyTemplate, p: Placeholder) -> int | None:
    """The exact length of every rendering, or None when it varies."""
    if p.name == "timestamp":
        return UNITS[p.unit]  # type: ignore[index]
    if p.name in NUMBERS and t.width(p) >= MAX_DIGITS[p.name]:
        return t.width(p)
    return None


def slot_regex(t: KeyTemplate, p: Placeholder) -> str:
    """A regex (no groups) of every rendering of `p` in this template."""
    chars = _chars(t, p)
    if (n := _fixed(t, p)) is not None:
        return f"{_class(chars)}{{{n}}}"  # type: ignore[arg-type]
    if p.name in NUMBERS and not t.width(p):
        return "(?:0|[1-9][0-9]*)"  # no leading zeros
    if p.name == "partition_by":
        seg = f"{_class(PATH_SEGMENT_CHARS)}+"
        return f"{seg}(?:/{seg}){{{t.path_segments - 1}}}"
    if chars is None:
        return "(?s:.*)"
    return f"{_class(chars)}+"


def _class(chars: frozenset[str]) -> str:
    return "[" + "".join(re.escape(c) for c in sorted(chars)) + "]"


_RANGES = (("a-z", frozenset("abcdefghijklmnopqrstuvwxyz")), ("A-Z", frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")),
           ("0-9", DIGITS))


def _describe(t: KeyTemplate, p: Placeholder) -> str:
    """What `p` may contain, for messages: `{{topic}} a-z A-Z 0-9 - . _`."""
    chars = _chars(t, p)
    if chars is None:
        return f"{p} any character"
    shown = []
    for label, cs in _RANGES:
        if cs <= chars:
            shown.append(label)
            chars -= cs
    return f"{p} " + " ".join(shown + sorted(chars))


# --- the safety check ----------------------------------------------------------------------------------------


def check_template(t: KeyTemplate, *, rotation: bool = False, record_slots: tuple[str, ...] = ()) -> None:
    """Refuse a template that could give two objects the same key, or whose keys cannot be parsed back.

    The dialect's required placeholders must appear.
    rotation: a window may be split into parts, so `{{part}}` is required.
    record_slots: values that differ between the buckets of one window (e.g. `partition_by` when a partitioner
    splits by record content); each must appear in the template.
    """
    used = {p.slot for p in t.placeholders}
    missing = [n for n in t.dialect.required if n not in used]
    if missing:
        raise InvalidTemplate(f"the {t.dialect.what} {t.text!r} must contain "
                              + ", ".join(f"{{{{{n}}}}}" for n in missing)
                              + ": without them two windows could get the same key")
    if rotation and "part" not in used:
        raise InvalidTemplate(f"the {t.dialect.what} {t.text!r} must contain {{{{part}}}}: rotation "
                              "(max_records_per_object / max_bytes_per_object) splits a window into parts, and "
                              "without it two parts would get the same key")
    for slot in record_slots:
        if slot not in used:
            raise InvalidTemplate(f"the {t.dialect.what} {t.text!r} must contain {{{{{slot}}}}}: partition_by "
                                  "splits a window into buckets by record content, and without it two buckets "
                                  "would get the same key")
    if "partition_by" in used and t.path_segments < 1:
        raise InvalidTemplate(f"the {t.dialect.what} {t.text!r} uses {{{{partition_by}}}} but partition_by is "
                              "empty")
    for p in t.placeholders:
        if p.name in NUMBERS and t.pad_type(p) == "right" and t.width(p) and t.pad_char(p) in DIGITS:
            raise InvalidTemplate(f"{p}: right padding with a digit cannot be parsed back")
    _check_unambiguous(t)


def _check_unambiguous(t: KeyTemplate) -> None:
    """Every key must split into its placeholders' values in exactly one way, whatever the values.

    From the left, a placeholder's end is known when its start is and it has a fixed width, or the literal after
    it holds a character it can never contain (it ends where the first such character, less its position in the
    literal, is). From the right, symmetrically, a start is known. A placeholder whose start is known from the left
    and whose end is known from the right takes what is left between; so at most one placeholder may be known
    from neither side's scan, else two splits of one key would be possible."""
    parts = t.parts
    n = len(parts)

    def bounded(i: int, step: int) -> bool:  # placeholder i's far edge is found scanning in direction `step`
        p = parts[i]
        assert isinstance(p, Placeholder)
        if _fixed(t, p) is not None:
            return True
        lit = parts[i + step] if 0 <= i + step < n else None
        chars = _chars(t, p)
        return isinstance(lit, str) and chars is not None and any(c not in chars for c in lit)

    holes = [i for i, p in enumerate(parts) if isinstance(p, Placeholder)]
    left = 0
    while left < len(holes) and bounded(holes[left], 1):
        left += 1
    right = len(holes)
    while right > left and bounded(holes[right - 1], -1):
        right -= 1
    if right - left > 1:
        a, b = parts[holes[left]], parts[holes[right - 1]]
        assert isinstance(a, Placeholder) and isinstance(b, Placeholder)
        raise InvalidTemplate(
            f"the {t.dialect.what} {t.text!r} is ambiguous: the end of {a} and the start of {b} cannot be found "
            "(the literal text next to them holds only characters they may contain, or two placeholders touch), so "
            "one key could be split in more than one way; separate them with a character one of them cannot "
            f"contain (e.g. '/' or '+'; {_describe(t, a)}, {_describe(t, b)}), or pad the numbers to a fixed "
            "width (:padding=true)")


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
    chars = _chars(t, p)
    if chars is not None and (not s or not set(s) <= chars | ({"/"} if p.name == "partition_by" else set())):
        raise ValueError(f"{p} cannot render {s!r}")
    if p.name == "timestamp" and len(s) != UNITS[p.unit]:  # type: ignore[index]
        raise ValueError(f"{p} must be {UNITS[p.unit]} digits, got {s!r}")  # type: ignore[index]
    if p.name == "partition_by" and s.count("/") != t.path_segments - 1:
        raise ValueError(f"{p} must have {t.path_segments} segments, got {s!r}")
    return s


@lru_cache(maxsize=256)
def key_regex(t: KeyTemplate) -> re.Pattern[str]:
    """Every key of the template, one group per placeholder (cached: a listing parses many keys)."""
    return re.compile("".join(re.escape(p) if isinstance(p, str) else f"({slot_regex(t, p)})" for p in t.parts))


def parse_key(t: KeyTemplate, key: str) -> dict[str, object]:
    """The values `render_key` was given (numbers as int, the rest as text); ValueError if `key` is not one this
    template renders."""
    m = key_regex(t).fullmatch(key)
    if m is None:
        raise ValueError(f"{key!r} does not match the {t.dialect.what} {t.text!r}")
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
        raise ValueError(f"{key!r} is not a key the {t.dialect.what} {t.text!r} writes (re-rendered: "
                         f"{render_key(t, values)!r})")
    return values
