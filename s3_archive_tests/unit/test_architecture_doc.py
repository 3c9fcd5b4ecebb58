"""docs/architecture.md is the one map of the package, and it matches the tree: every module is named in it, every
file it or the architecture test cites exists (with a name after `::`, the name is defined in that file), each folder's
`__init__.py` is one line pointing at it, and the README lists every page of docs/."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "s3_archive"
# Where a path of the doc is read from: the repository, the package (`archive/plan.py`), the archive's folder (its
# table's `driver/commit.py`) and the tests (`integration/archive/`, `unit/keys/`).
BASES = (ROOT, PACKAGE, PACKAGE / "archive", ROOT / "s3_archive_tests")
SEARCHED = ("s3_archive", "s3_archive_tests", "bench", "scripts", "docs", "jvm", "deploy")
FILE = re.compile(r"[\w*./-]*[\w*]\.(?:py|md|yaml|toml|json)\b(?:::\w+)?")
FOLDER = re.compile(r"`([\w./-]+/)`")  # a folder only when quoted: "SASL/TLS/mTLS" is not one


def cited(text: str) -> set[str]:
    return set(FILE.findall(text)) | set(FOLDER.findall(text))


def exists(path: str) -> bool:
    if "/" not in path.rstrip("/"):  # a bare name: somewhere in the tree (module names are unique)
        return any((base / path).exists() for base in BASES) or any(
            next((ROOT / d).rglob(path.rstrip("/")), None) is not None for d in SEARCHED)
    return any((base / path).exists() or list(base.glob(path)) for base in BASES)


def defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def missing(text: str) -> list[str]:
    bad = []
    for token in sorted(cited(text)):
        path, _, name = token.partition("::")
        if not exists(path):
            bad.append(token)
        elif name:
            files = [base / path for base in BASES if (base / path).is_file()]
            if not any(defines(f, name) for f in files):
                bad.append(f"{token} (no {name} defined there)")
    return bad


def test_the_doc_cites_only_files_that_exist():
    bad = missing(DOC.read_text())
    assert not bad, f"docs/architecture.md cites what is not there: {bad}"


def test_the_architecture_tests_cite_only_files_that_exist():
    tests = ROOT / "s3_archive_tests" / "unit"
    bad = {p.name: m for p in (tests / "test_architecture.py", Path(__file__)) if (m := missing(p.read_text()))}
    assert not bad, bad


def test_the_doc_names_every_module():
    """Every module by its file name, its path from the package (`archive/driver/commit.py`) or a pattern
    (`spark_*.py`): the folders' `__init__.py` point here instead of listing their modules."""
    names = [t.partition("::")[0] for t in cited(DOC.read_text())]
    unnamed = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.name == "__init__.py":
            continue
        rel = p.relative_to(PACKAGE).as_posix()
        if not any(fnmatch.fnmatch(p.name, n) if "/" not in n else fnmatch.fnmatch(rel, n) or
                   fnmatch.fnmatch(rel, "*/" + n) for n in names):
            unnamed.append(f"s3_archive/{rel}")
    assert not unnamed, f"not named in docs/architecture.md: {unnamed}"


def test_each_folder_init_is_one_line_pointing_at_the_doc():
    bad = []
    for p in sorted(PACKAGE.rglob("__init__.py")):
        if p.parent == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(p.read_text())) or ""
        if "\n" in doc or "docs/architecture.md" not in doc:
            bad.append(str(p.relative_to(ROOT)))
    assert not bad, f"a folder's docstring is one line naming docs/architecture.md: {bad}"


def test_the_readme_lists_every_page_of_docs():
    readme = (ROOT / "README.md").read_text()
    unlisted = [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")) if f"`docs/{p.name}`" not in readme]
    assert not unlisted, f"not in the README's Docs list: {unlisted}"
