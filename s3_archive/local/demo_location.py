"""The demo's code location (`s3-archive demo` serves it): its archives declared as components in `demo_defs/`, a
folder per declaration, loaded by Dagster's own component loader as a `dg` project's defs folder is."""

from __future__ import annotations

import importlib
from pathlib import Path

import dagster as dg

DEMO_DEFS = Path(__file__).with_name("demo_defs")  # demo/defs.yaml (KafkaArchive), replay/ and preview/ (targets)


def load_demo_defs() -> dg.Definitions:
    """The demo's definitions, from its declarations (`s3_archive.KafkaArchive`, `s3_archive.KafkaRestoreTarget`)."""
    return dg.load_defs(defs_root=importlib.import_module("s3_archive.local.demo_defs"))


@dg.definitions
def defs() -> dg.Definitions:
    return load_demo_defs()
