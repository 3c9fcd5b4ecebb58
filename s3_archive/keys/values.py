"""Partition values as path segments, and the time path format. Pure.

A value becomes one path segment that is never empty, never contains `/`, `=`, spaces or non-ASCII, and decodes
back to exactly the value (encode_value / decode_value). The time path format is a Confluent/Joda-style
`path.format` ('year'=yyyy/'month'=MM/...) rendered from the wall-clock time in a time zone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NULL = "(null)"
EMPTY = "(empty)"
HEX = "(hex)"  # a binary value that is not UTF-8: (hex) and its bytes in upper-case hex
NO_BUCKETS = "(all)"  # the bucket of every record when nothing splits a window


_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def encode_value(v: str | None) -> str:
    """A partition value as a path segment: never empty, never `/`, `=`, space, `+`, `*` or non-ASCII, never
    starting with `.` or `_` (readers skip such directories). UTF-8 bytes outside `A-Za-z0-9.-_` become `%XX`;
    None is `(null)` and "" is `(empty)` — a real "(null)" is `%28null%29`."""
    if v is None:
        return NULL
    if v == "":
        return EMPTY
    out = "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in v.encode("utf-8"))
    if out[0] in "._":
        out = f"%{ord(out[0]):02X}{out[1:]}"
    return out


def encode_bytes(v: bytes | None) -> str:
    """A binary value (record key, header value): its text if it is UTF-8, else `(hex)<HEX>`."""
    if v is None:
        return NULL
    try:
        return encode_value(v.decode("utf-8"))
    except UnicodeDecodeError:
        return HEX + v.hex().upper()


_ESCAPE = re.compile(r"%([0-9A-F]{2})")


def decode_value(s: str) -> str | bytes | None:
    """The inverse of encode_value / encode_bytes (bytes only for the `(hex)` form); ValueError for text that
    encode_value does not produce."""
    if s == NULL:
        return None
    if s == EMPTY:
        return ""
    if s.startswith(HEX) and re.fullmatch(r"(?:[0-9A-F]{2})+", s[len(HEX):]):
        raw = bytes.fromhex(s[len(HEX):])
        if encode_bytes(raw) == s:
            return raw
        raise ValueError(f"not an encoded partition value: {s!r} (UTF-8 bytes are written as text)")
    try:
        raw = bytes(int(m, 16) if m else ord(c) for c, m in _tokens(s))
        v = raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"not an encoded partition value: {s!r}") from None
    if encode_value(v) != s:
        raise ValueError(f"not an encoded partition value: {s!r} (expected {encode_value(v)!r})")
    return v


def _tokens(s: str):
    i = 0
    while i < len(s):
        if s[i] == "%":
            if not _ESCAPE.match(s, i):
                raise ValueError(s)
            yield "", s[i + 1:i + 3]
            i += 3
        else:
            if ord(s[i]) > 127:
                raise ValueError(s)
            yield s[i], ""
            i += 1


# --- the time path format ---------------------------------------------------------------------------------------

TIME_UNITS = {"yyyy": 4, "MM": 2, "dd": 2, "HH": 2, "mm": 2}
_UNIT_SECONDS = {"dd": 86_400, "HH": 3_600, "mm": 60}
COARSER_UNITS = {"yyyy": (), "MM": ("yyyy",), "dd": ("yyyy", "MM"), "HH": ("yyyy", "MM", "dd"),
            "mm": ("yyyy", "MM", "dd", "HH")}
_FORMAT_TOKEN = re.compile(r"'([^']*)'|(yyyy|YYYY|MM|dd|HH|mm)|([/=._-])|(.)")
_QUOTED = re.compile(r"[A-Za-z0-9_.=-]*")


def parse_path_format(fmt: str) -> tuple[str | tuple[str], ...]:
    """A Confluent/Joda-style `path.format` as literals and (unit,) tuples.

    Units: yyyy (or YYYY, both the calendar year), MM, dd, HH, mm; quoted text ('year') and / = . _ - are literal.
    """
    out: list[str | tuple[str]] = []
    for m in _FORMAT_TOKEN.finditer(fmt):
        quoted, unit, sep, other = m.groups()
        if other is not None:
            raise ValueError(f"path_format {fmt!r}: {other!r} at position {m.start()} is neither a unit "
                             "(yyyy MM dd HH mm) nor a literal (quote text: 'year'; or / = . _ -)")
        if quoted is not None and not _QUOTED.fullmatch(quoted):
            raise ValueError(f"path_format {fmt!r}: quoted text {quoted!r} may hold only A-Z a-z 0-9 _ . = -")
        if unit is not None:
            out.append(("yyyy" if unit == "YYYY" else unit,))
        else:
            text = quoted if quoted is not None else sep
            if out and isinstance(out[-1], str):
                out[-1] += text
            elif text:
                out.append(text)
    units = [u[0] for u in out if isinstance(u, tuple)]
    if not units:
        raise ValueError(f"path_format {fmt!r} has no time unit (yyyy MM dd HH mm)")
    if len(set(units)) != len(units):
        raise ValueError(f"path_format {fmt!r} uses a unit twice")
    text = render_format(out, {u: 0 for u in units})
    if text.startswith("/") or text.endswith("/") or "//" in text:
        raise ValueError(f"path_format {fmt!r} makes an empty path segment")
    return tuple(out)


def render_format(tokens: Sequence[str | tuple[str]], fields: Mapping[str, int] | None) -> str:
    return "".join(t if isinstance(t, str) else (NULL if fields is None else f"{fields[t[0]]:0{TIME_UNITS[t[0]]}d}")
                   for t in tokens)


def wall_seconds(timestamp_us: int, tz: str) -> int:
    """Seconds since 1970-01-01 00:00 of the wall-clock time in `tz` at this instant (floored)."""
    instant = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=timestamp_us)
    local = instant.astimezone(ZoneInfo(tz)).replace(tzinfo=None)
    return (local - datetime(1970, 1, 1)) // timedelta(seconds=1)


def wall_fields(seconds: int) -> dict[str, int]:
    day = date(1970, 1, 1) + timedelta(days=seconds // 86_400)
    sod = seconds % 86_400
    return {"yyyy": day.year, "MM": day.month, "dd": day.day, "HH": sod // 3_600, "mm": sod % 3_600 // 60}


def check_timezone(tz: str) -> str:
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        ok = False
    else:
        ok = tz == "UTC" or "/" in tz
    if not ok:
        raise ValueError(f"not an IANA time zone: {tz!r} (e.g. 'UTC', 'Europe/Berlin', 'America/New_York')")
    return tz
