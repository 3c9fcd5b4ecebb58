"""The reset command the demo prints runs as typed: by name when `s3-archive` on PATH is this one, else by the
path of this environment's script (after `make demo`: `.venv/bin/s3-archive`, from the repository)."""

from __future__ import annotations

import sys
from pathlib import Path

from s3_archive.local.processes import purge_command

OURS = Path(sys.executable).parent / "s3-archive"


def test_by_name_when_on_path(monkeypatch):
    monkeypatch.setenv("PATH", str(OURS.parent))
    assert purge_command() == "s3-archive local down --purge"


def test_by_path_relative_to_where_it_is_typed_when_not_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(OURS.parent.parent)
    assert purge_command() == f"{Path(OURS.parent.name) / 's3-archive'} local down --purge"
    monkeypatch.chdir(tmp_path)
    assert purge_command() == f"{OURS} local down --purge"
