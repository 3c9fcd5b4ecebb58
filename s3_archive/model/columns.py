"""Column names for fields decoded from record payloads (`value_decoding: json`), whose names can be anything: the one
rule the archive's writer (archive/driver/spark_job.py) and the catalog's tables (catalog/tables.py) share. Pure.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

# A column (or struct field) name Athena's DDL takes as it is: lowercase letters, digits and _ (its documented rule;
# Hive folds case, so `userId` is `userid`).
COLUMN = re.compile(r"[a-z_][a-z0-9_]{0,254}")
# The key in a stored column's Spark metadata (the manifest's `schema`) that holds the payload field's own name when
# the column is stored under another (stored_names).
SOURCE_FIELD = "s3_archive.field"
# The key in a decoded column's Spark metadata naming the record part it was decoded from, when it is the key
# (`key_decoding`); absent: the value.
PART_FIELD = "s3_archive.part"


def _order(name: str) -> tuple[bool, bool, str]:
    """Who chooses first: names valid as they are, then valid ones in another case, then the rest; by name."""
    return not COLUMN.fullmatch(name.lower()), name != name.lower(), name


def column_names(names: Sequence[str], taken: Iterable[str] = ()) -> dict[str, str]:
    """Each field name (from record payloads: anything) -> a column name matching `COLUMN`, never one of `taken`
    and never another's after case folding. A valid name is kept (lowercased); any other is renamed: accents
    dropped, every other character outside a-z 0-9 _ made `_`, `_` before a leading digit, `field` when nothing is
    left, `_2`, `_3`, ... against a clash. Names valid as they are go first, then valid ones in another case, so
    renaming another field never takes theirs and the choice does not depend on the fields' order."""
    used = {t.lower() for t in taken}
    out: dict[str, str] = {}
    for name in sorted(dict.fromkeys(names), key=_order):
        base = name.lower()
        if not COLUMN.fullmatch(base):
            ascii_ = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode()
            base = re.sub(r"[^a-z0-9_]", "_", ascii_)
            base = base if re.search("[a-z0-9]", base) else "field"
            base = ("_" + base if base[0].isdigit() else base)[:240]
        candidate, n = base, 1
        while candidate in used:
            n += 1
            candidate = f"{base}_{n}"
        used.add(candidate)
        out[name] = candidate
    return {n: out[n] for n in dict.fromkeys(names)}


def stored_names(names: Sequence[str], taken: Iterable[str] = ()) -> dict[str, str]:
    """Each decoded field's (prefixed) name -> the name the archive stores its column under: its own name, unless it
    equals a `taken` column (the kept envelope columns) or an earlier field after case folding (`ID` next to `id`;
    Spark resolves names case-insensitively, so both could not be read). Then it is the name `column_names` gives
    it (`id_2`), which is what the catalog names that column too: the catalog maps every stored name that is
    valid to itself, so its table reads the renamed column. "Earlier" is `column_names`' order, so the choice does
    not depend on the fields' order."""
    taken = list(taken)
    catalog = column_names(names, taken)
    seen = {t.lower() for t in taken}
    out: dict[str, str] = {}
    for name in sorted(dict.fromkeys(names), key=_order):
        out[name] = catalog[name] if name.lower() in seen else name
        seen |= {name.lower(), out[name].lower()}
    return {n: out[n] for n in dict.fromkeys(names)}
