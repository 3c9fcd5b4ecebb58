"""Object names of archives written by the Kafka Connect S3 sinks, parsed back to (partition, start offset).

- aiven: `file.name.template` (`{{topic}}-{{partition}}-{{start_offset}}` by default, `{{partition:padding=true}}`
  10 digits, `{{start_offset:padding=true}}` 20 digits, `{{timestamp:unit=…}}`, `{{key}}`); ambiguous templates
  are refused with the reason.
- confluent (DefaultPartitioner): `<topics.dir>/<topic>/partition=<p>/<topic>+<p>+<start offset>.<ext>`, with
  `.keys.<ext>` / `.headers.<ext>` siblings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DEFAULT_AIVEN_TEMPLATE = "{{topic}}-{{partition}}-{{start_offset}}"


_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_DIGITS = frozenset("0123456789")


class InvalidTemplate(ValueError):
    """A file name template that is malformed, or whose parse would be ambiguous."""


@dataclass(frozen=True)
class Var:
    """One `{{name}}` or `{{name:param=value}}` of a template."""

    name: str
    param: str | None = None  # "padding" | "unit"
    arg: str | None = None

    @property
    def text(self) -> str:
        return f"{{{{{self.name}}}}}" if self.param is None else f"{{{{{self.name}:{self.param}={self.arg}}}}}"

    @property
    def width(self) -> int | None:
        """Fixed width of the rendered value, or None when it varies."""
        if self.name == "partition" and self.arg == "true":
            return 10
        if self.name == "start_offset" and self.arg == "true":
            return 20
        if self.name == "timestamp":
            return 4 if self.arg == "yyyy" else 2
        return None

    @property
    def regex(self) -> str:
        if self.width is not None:
            return rf"[0-9]{{{self.width}}}"
        if self.name in ("partition", "start_offset"):
            return r"0|[1-9][0-9]*"  # Java's Long.toString: no leading zeros
        if self.name == "topic":
            return r"[a-zA-Z0-9._-]+"
        return r".*"  # key: whatever the key's string form is

    def may_contain(self, c: str) -> bool:
        if self.name in ("partition", "start_offset", "timestamp"):
            return c in _DIGITS
        if self.name == "topic":
            return c in _TOPIC_CHARS
        return True

    def render(self, value: Any) -> str:
        if self.name in ("partition", "start_offset"):
            return f"{value:0{self.width}d}" if self.width else str(value)
        if self.name == "timestamp":
            return {"yyyy": f"{value.year:04d}", "MM": f"{value.month:02d}", "dd": f"{value.day:02d}",
                    "HH": f"{value.hour:02d}"}[self.arg]
        return str(value)


_PARAMS = {"partition": ("padding", ("true", "false"), False), "start_offset": ("padding", ("true", "false"), False),
           "timestamp": ("unit", ("yyyy", "MM", "dd", "HH"), True), "topic": None, "key": None}
_VAR = re.compile(r"\{\{\s*([A-Za-z_]+)\s*(?::\s*([A-Za-z_]+)\s*=\s*([A-Za-z0-9_]+)\s*)?\}\}")


@dataclass(frozen=True)
class KeyTemplate:
    """A parsed `file.name.template`: literals and variables alternating (`literals` has one more item)."""

    text: str
    literals: tuple[str, ...]
    variables: tuple[Var, ...]

    @property
    def names(self) -> set[str]:
        return {v.name for v in self.variables}

    def render(self, topic: str = "", partition: int = 0, start_offset: int = 0, timestamp: datetime | None = None,
               key: str = "") -> str:
        values = {"topic": topic, "partition": partition, "start_offset": start_offset, "key": key,
                  "timestamp": timestamp or datetime(1970, 1, 1, tzinfo=UTC)}
        out = [self.literals[0]]
        for v, lit in zip(self.variables, self.literals[1:]):
            out += [v.render(values[v.name]), lit]
        return "".join(out)

    def compiled(self) -> re.Pattern[str]:
        parts = [re.escape(self.literals[0])]
        for i, (v, lit) in enumerate(zip(self.variables, self.literals[1:])):
            parts += [f"(?P<v{i}>{v.regex})", re.escape(lit)]
        return re.compile("".join(parts), re.DOTALL)

    def parse(self, name: str, pattern: re.Pattern[str] | None = None) -> dict[str, Any] | None:
        """The values of an object name (after the prefix and compression suffix), or None if it does not fit.
        Keys: topic, partition, start_offset (ints), timestamp (dict unit -> int), key."""
        m = (pattern or self.compiled()).fullmatch(name)
        if m is None:
            return None
        out: dict[str, Any] = {}
        for i, v in enumerate(self.variables):
            text = m[f"v{i}"]
            if v.name == "timestamp":
                out.setdefault("timestamp", {})[v.arg] = int(text)
            elif v.name in ("partition", "start_offset"):
                out[v.name] = int(text)
            else:
                out[v.name] = text
        return out


def parse_template(text: str) -> KeyTemplate:
    """Parse and check a template; ambiguous templates are refused with the reason."""
    literals: list[str] = []
    variables: list[Var] = []
    pos = 0
    for m in _VAR.finditer(text):
        literals.append(text[pos:m.start()])
        name, param, arg = m[1], m[2], m[3]
        if name not in _PARAMS:
            raise InvalidTemplate(f"template {text!r}: unknown variable {{{{{name}}}}}; allowed: topic, partition, "
                                  "start_offset, timestamp, key")
        spec = _PARAMS[name]
        if param is not None:
            if spec is None or param != spec[0]:
                allowed = f"only {spec[0]}" if spec else "none"
                raise InvalidTemplate(f"template {text!r}: {{{{{name}}}}} has no parameter {param!r} "
                                      f"(allowed: {allowed})")
            if arg not in spec[1]:
                raise InvalidTemplate(f"template {text!r}: {{{{{name}:{param}={arg}}}}}: {param} must be one of "
                                      f"{', '.join(spec[1])}")
        elif spec is not None and spec[2]:
            raise InvalidTemplate(f"template {text!r}: {{{{{name}}}}} needs {spec[0]}=" + "|".join(spec[1]))
        variables.append(Var(name, param, arg if param is not None else None))
        pos = m.end()
    literals.append(text[pos:])
    for lit in literals:
        if "{{" in lit or "}}" in lit:
            raise InvalidTemplate(f"template {text!r}: malformed variable near {lit!r}; variables look like "
                                  "{{name}} or {{name:param=value}}")
    seen: set[tuple[str, str | None]] = set()
    for v in variables:
        ident = (v.name, v.arg if v.name == "timestamp" else None)
        if ident in seen:
            raise InvalidTemplate(f"template {text!r}: {v.text} appears twice")
        seen.add(ident)
    t = KeyTemplate(text, tuple(literals), tuple(variables))
    _check_unambiguous(t)
    return t


def _check_unambiguous(t: KeyTemplate) -> None:
    """Every variable's span must follow from the template alone, for every key it can render.

    From the left: variable i starts where i-1 ends; it ends after its fixed width, or at the first occurrence of
    the next literal when that literal has a character variable i can never contain. From the right, symmetrically
    (the last variable ends where the trailing literal starts). A variable is located when its start and end are
    both known, from either side; otherwise two splits of one name would be possible."""
    vs, lits, n = t.variables, t.literals, len(t.variables)
    if n == 0:
        return

    def bounded_by(v: Var, lit: str) -> bool:
        return any(not v.may_contain(c) for c in lit)

    start_l, end_l = [False] * n, [False] * n
    known = True
    for i, v in enumerate(vs):
        start_l[i] = known
        end_l[i] = known = known and (v.width is not None or bounded_by(v, lits[i + 1]))
    start_r, end_r = [False] * n, [False] * n
    known = True
    for i in range(n - 1, -1, -1):
        end_r[i] = known
        start_r[i] = known = known and (vs[i].width is not None or bounded_by(vs[i], lits[i]))
    for i, v in enumerate(vs):
        if (start_l[i] or start_r[i]) and (end_l[i] or end_r[i]):
            continue
        # Name the first undetermined boundary.
        j = i if not (end_l[i] or end_r[i]) else i - 1
        a, b, lit = vs[j], vs[j + 1], lits[j + 1]
        if lit == "":
            why = f"{a.text} and {b.text} are adjacent with no separator"
        else:
            why = (f"every character of the separator {lit!r} between {a.text} and {b.text} can occur in both, "
                   "and neither side pins the boundary down")
        raise InvalidTemplate(
            f"template {t.text!r} is ambiguous: {why}, so one object name could be split in more than one way. "
            "Separate variables with a character that cannot occur in one of them (e.g. '/' after {{topic}}, "
            "'-' between numbers), or use padding=true for fixed-width numbers")


_CONFLUENT_EXT = {"avro": (".avro",), "json": (".json",), "parquet": (".parquet",), "bytes": (".bin",)}


def confluent_parse(topic: str, fmt: str, gzipped: bool, rest: str) -> tuple[int, int, str] | None:
    """(partition, start offset, 'values'|'keys') of a Confluent object name (after the prefix), or None."""
    m = re.fullmatch(r"([^/]+)/partition=(0|[1-9][0-9]*)/([^/+]+)\+(0|[1-9][0-9]*)\+([0-9]+)((?:\.[^./]+)+)",
                     rest)
    if m is None or m[1] != topic or m[3] != topic or m[2] != m[4]:
        return None
    exts = m[6]
    kind = "values"
    for marker in (".keys", ".headers"):
        if exts.startswith(marker + "."):
            kind, exts = marker[1:], exts[len(marker):]
    gz = ".gz" if gzipped else ""
    ok = exts in tuple(e + gz for e in _CONFLUENT_EXT[fmt])
    if fmt == "parquet":  # <codec>.parquet, e.g. .snappy.parquet
        ok = ok or re.fullmatch(r"\.[a-z0-9]+\.parquet", exts) is not None
    return (int(m[2]), int(m[5]), kind) if ok else None
