"""The name rules shared by config models: archive and restore-target names, Kafka topic names."""

from __future__ import annotations

import re

NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")  # archive / restore target names (they become Dagster asset keys)
TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's own rule


def check_name(v: str) -> str:
    """`v` if it is a valid archive or restore-target name; ValueError naming the rule otherwise."""
    if not NAME.fullmatch(v):
        raise ValueError(f"must match {NAME.pattern} (lowercase letters, digits, _), got {v!r}")
    return v
