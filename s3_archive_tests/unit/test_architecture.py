"""The package's shape, checked: folders import only downwards, no import cycles, the pure folders import no I/O
library, the stages import no Dagster, the write's executor side imports no Spark or Dagster (nor the driver's
side), module names are unique, `__init__` files only describe their folder, no private Dagster API, no module
grows past ~500 lines (docs/architecture.md)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "s3_archive"
# A folder may import its own modules and those of folders with a lower rank; the stages (rank 4) are siblings
# and never import each other.
RANK = {"model": 0, "keys": 1, "config": 2, "io": 3, "archive": 4, "restore": 4, "catalog": 4, "lifecycle": 4,
        "defs": 5, "definitions": 6, "iam": 6, "local": 7, "cli": 8}
PURE = {"model", "keys"}  # pure logic: the standard library and pydantic only
STAGES = {"archive", "restore", "catalog", "lifecycle"}  # Dagster is defs/'s (and the resources' in io/)
EXECUTOR = "s3_archive.archive.executor"  # runs in Spark's Python workers: no Spark, no Dagster, no driver code
DRIVER = "s3_archive.archive.driver"
# defs/ splits every domain the same way (docs/architecture.md), so these names repeat there, and only there.
DEFS_NAMES = {"assets", "sensors", "checks", "schedules", "partitions", "config"}
MAX_LINES = 500


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) of every import, except those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
            # `from s3_archive.x import y` may name a module y
            out += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return out


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def project_graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {i for i, _ in imports(p) if i in mods and i != m} for m, p in mods.items()}


def test_folders_import_only_downwards():
    bad = []
    for m, p in modules().items():
        if m == "s3_archive":
            continue
        for imp, line in imports(p):
            if not imp.startswith("s3_archive.") or imp not in modules():
                continue
            src, dst = folder(m), folder(imp)
            if src != dst and (RANK[dst] > RANK[src] or RANK[dst] == RANK[src]):
                bad.append(f"{p.relative_to(PACKAGE.parent)}:{line}: {src}/ imports {imp} ({dst}/)")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = project_graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, [*stack, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_pure_folders_import_no_io_library():
    allowed = set(sys.stdlib_module_names) | {"pydantic", "s3_archive"}
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line}: {imp}" for m, p in modules().items() if folder(m) in PURE
           for imp, line in imports(p) if imp.split(".")[0] not in allowed]
    assert not bad, "\n".join(bad)


def closure(start: str, graph: dict[str, set[str]]) -> set[str]:
    """`start` and every project module it imports, directly or not."""
    seen, todo = {start}, [start]
    while todo:
        for n in graph[todo.pop()] - seen:
            seen.add(n)
            todo.append(n)
    return seen


def test_the_stages_import_no_dagster():
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line}: {imp}" for m, p in modules().items() if folder(m) in STAGES
           for imp, line in imports(p) if imp.split(".")[0] in ("dagster", "dagster_aws", "dagster_pyspark")]
    assert not bad, "\n".join(bad)


def test_the_executor_side_imports_no_spark_dagster_or_driver_code():
    """What a write task imports, directly or through other modules of the package: it runs in the executors'
    Python workers, which must not pay for (or need) Spark's or Dagster's modules."""
    mods, graph = modules(), project_graph()
    executor = [m for m in mods if m.startswith(EXECUTOR + ".") or m == "s3_archive.archive.protocol"]
    assert executor
    bad = []
    for start in executor:
        for m in sorted(closure(start, graph)):
            if m.startswith(DRIVER):
                bad.append(f"{start} reaches {m} (the driver's side)")
            bad += [f"{start} reaches {m}, which imports {imp} (line {line})" for imp, line in imports(mods[m])
                    if imp.split(".")[0] in ("pyspark", "dagster", "dagster_aws", "dagster_pyspark")]
    assert not bad, "\n".join(bad)


def test_module_names_are_unique():
    """A stack trace or an import names one place: no two modules share a file name, but defs/'s per-domain
    files (assets.py, sensors.py, ...)."""
    by_name: dict[str, list[str]] = {}
    for m, p in modules().items():
        if p.name != "__init__.py" and not (folder(m) == "defs" and p.stem in DEFS_NAMES):
            by_name.setdefault(p.name, []).append(str(p.relative_to(PACKAGE.parent)))
    same = {n: ps for n, ps in by_name.items() if len(ps) > 1}
    assert not same, same


def test_init_files_only_describe_their_folder():
    """`__init__.py` holds a docstring and nothing else: importing a folder loads no other module."""
    bad = [str(p.relative_to(PACKAGE.parent)) for m, p in modules().items() if p.name == "__init__.py"
           and m != "s3_archive" and any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
                                         for n in ast.parse(p.read_text()).body)]
    assert not bad, bad


def test_no_private_dagster_api():
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line}: {imp}" for p in modules().values()
           for imp, line in imports(p) if imp.startswith("dagster._")]
    bad += [f"{p.relative_to(PACKAGE.parent)}: mentions dagster._" for p in modules().values()
            if "dagster._" in p.read_text()]
    assert not bad, "\n".join(bad)


def test_no_module_over_the_size_limit():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by role (over {MAX_LINES} lines): {long}"


# Heavy libraries a run imports when it uses them, never when the definitions load (docs/architecture.md).
NOT_AT_LOAD = ("pyspark", "pyarrow", "boto3", "dagster_aws", "dagster_pyspark", "pandas")


def test_loading_the_definitions_imports_no_heavy_library(tmp_path):
    code = ("import sys, s3_archive.definitions; "
            f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({NOT_AT_LOAD!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "S3_ARCHIVE_STATE_DIR": str(tmp_path)})
    assert out.stdout.strip() == "", f"imported when the definitions load: {out.stdout.strip()}"


# bench/ (the benchmark suite and its tools, docs/benchmarks.md): the same import rules where they apply.
BENCH = PACKAGE.parent / "bench"


def bench_modules() -> dict[str, Path]:
    return {".".join(p.relative_to(BENCH.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(BENCH.rglob("*.py"))}


def test_no_import_cycles_in_bench():
    mods = bench_modules()
    graph = {m: {i for i, _ in imports(p) if i in mods and i != m} for m, p in mods.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, [*stack, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_bench_imports_no_private_name_of_another_module():
    mods = bench_modules()
    bad = [f"{p.relative_to(BENCH.parent)}:{line}: {imp}" for p in mods.values() for imp, line in imports(p)
           if imp.rsplit(".", 1)[0] in mods and imp.rsplit(".", 1)[-1].startswith("_")]
    assert not bad, "\n".join(bad)
