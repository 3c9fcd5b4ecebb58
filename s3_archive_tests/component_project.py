"""A fresh dg project on disk, as `create-dagster project` lays it out, for the component tests."""

from __future__ import annotations

from pathlib import Path

PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.11,<3.12"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "{name}"
registry_modules = ["s3_archive"]
"""

DEFINITIONS = """from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def new_project(root: Path, name: str = "shop") -> Path:
    """`root/` with pyproject.toml and `src/<name>/` (definitions.py and an empty defs/ folder); returns `root`."""
    pkg = root / "src" / name
    (pkg / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (pkg / "__init__.py").write_text("")
    (pkg / "defs" / "__init__.py").write_text("")
    (pkg / "definitions.py").write_text(DEFINITIONS)
    return root
