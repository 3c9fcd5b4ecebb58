"""The package's shape, checked: folders import only downwards, no import cycles, the pure folders import no I/O
library, the stages import no Dagster, the write's executor side imports no Spark or Dagster (nor the driver's
side), the driver reaches the executor side only through the task entry points and archive/protocol.py imports
neither side, module names are unique, `__init__` files only describe their folder, no private Dagster API, no
module grows past ~500 lines, defs/ reaches Kafka and S3 only through the stages, no function takes more than 8
parameters or runs past 80 lines (docs/architecture.md)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "s3_archive"
# A folder may import its own modules and those of folders with a lower rank; the stages (rank 4) are siblings
# and never import each other. recovery/ (a cluster's recovery) drives the restore, and erasure/ reads what the
# restore reads and writes it again with the archive's encoders, so both sit above the stages.
RANK = {"model": 0, "keys": 1, "config": 2, "io": 3, "archive": 4, "restore": 4, "catalog": 4, "lifecycle": 4,
        "recovery": 4.5, "erasure": 4.5, "defs": 5, "definitions": 6, "iam": 6, "metrics": 6, "components": 7, "local": 7, "cli": 8}
PURE = {"model", "keys"}  # pure logic: the standard library and pydantic only
# Dagster is defs/'s (and the resources' in io/)
STAGES = {"archive", "restore", "catalog", "lifecycle", "recovery", "erasure"}
EXECUTOR = "s3_archive.archive.executor"  # runs in Spark's Python workers: no Spark, no Dagster, no driver code
DRIVER = "s3_archive.archive.driver"
PROTOCOL = "s3_archive.archive.protocol"  # the contract between the two sides
# What the driver may import from the executor side: the functions Spark runs in the write tasks (mapInArrow's).
# Everything else the two sides share is in archive/protocol.py (or a module of archive/ beside it).
TASK_ENTRY_POINTS = {f"{EXECUTOR}.task": {"write_task", "read_task", "envelope_task"},
                     f"{EXECUTOR}.registry_decode": {"table_rows"}}
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


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import cycle of `graph` (module -> the modules it imports), as `a -> b -> a`: a depth-first walk."""
    state: dict[str, int] = {}
    found: list[str] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                found.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, [*stack, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_no_import_cycles():
    found = cycles(project_graph())
    assert not found, "\n".join(found)


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


def every_import(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, the names imported from it, line) of every absolute import: inside functions and under
    `if TYPE_CHECKING:` too (`import m` gives the module and no name)."""
    out: list[tuple[str, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


def test_the_driver_imports_only_the_task_entry_points_from_the_executor_side():
    """The driver side (archive/driver/) takes from archive/executor/ only what Spark runs in the tasks; the rest of
    what the two sides share is the contract's (archive/protocol.py)."""
    bad = []
    for m, p in modules().items():
        if not m.startswith(DRIVER + "."):
            continue
        where = p.relative_to(PACKAGE.parent)
        for module, names, line in every_import(p):
            whole = module == EXECUTOR or (module.startswith(EXECUTOR + ".") and not names) \
                or (module == "s3_archive.archive" and "executor" in names)
            if whole:  # `import s3_archive.archive.executor.x`, `from s3_archive.archive.executor import x`
                bad.append(f"{where}:{line}: imports a whole executor module ({module} {names})")
            elif module.startswith(EXECUTOR + "."):
                bad += [f"{where}:{line}: {module}.{n} is not a task entry point"
                        for n in sorted(set(names) - TASK_ENTRY_POINTS.get(module, set()))]
    assert not bad, "\n".join(bad)


def test_the_protocol_imports_neither_side():
    """archive/protocol.py is the whole contract: it defines every type both sides use, importing no module of
    archive/executor/ or archive/driver/, not even for a type hint."""
    path = modules()[PROTOCOL]
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line}: {module} {names}" for module, names, line in every_import(path)
           if module.startswith((EXECUTOR, DRIVER))
           or (module == "s3_archive.archive" and {"executor", "driver"} & set(names))]
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


# defs/ wires Dagster to the stages (docs/architecture.md): Kafka and S3 are reached through a stage's entry point, never by a
# client library, an io/ helper that lists, reads or asks for offsets, or a request sent from defs/ itself.
DEFS_NO_LIBRARY = ("confluent_kafka", "boto3", "botocore")
DEFS_NO_IO = {"s3_archive.io.s3": ("list_objects", "list_prefixes", "delete_keys", "read_manifest", "verify_manifest",
                                   "error_code", "error_message")}
KAFKA_REQUESTS = ("offsets", "list_offsets", "list_offsets_many", "group_offsets", "set_group_offsets",
                  "count_records", "first_record_timestamps", "retention_ms")  # KafkaResource's
S3_REQUESTS = ("list_objects_v2", "get_paginator", "get_object", "head_object", "put_object", "delete_object",
               "delete_objects", "copy_object", "restore_object", "get_bucket_lifecycle_configuration")


def defs_modules() -> dict[str, Path]:
    return {m: p for m, p in modules().items() if folder(m) == "defs"}


def defined_names(path: Path) -> set[str]:
    """The functions and methods a module defines."""
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


def test_defs_imports_no_kafka_or_s3_client_library():
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line}: {imp}" for p in defs_modules().values()
           for imp, line in imports(p) if imp.split(".")[0] in DEFS_NO_LIBRARY]
    assert not bad, "defs/ reaches Kafka and S3 only through the stages' functions:\n" + "\n".join(bad)


def test_defs_imports_no_io_helper_that_lists_reads_or_asks_for_offsets():
    mods = modules()
    for module, names in DEFS_NO_IO.items():
        assert set(names) <= defined_names(mods[module]), f"{module} no longer defines all of {names}"
    banned = {f"{module}.{n}" for module, names in DEFS_NO_IO.items() for n in names}
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line}: {imp}" for p in defs_modules().values()
           for imp, line in imports(p) if imp in banned]
    assert not bad, "defs/ lists and reads S3 only through the stages' functions:\n" + "\n".join(bad)


def test_defs_sends_no_kafka_offset_or_s3_object_request_itself():
    assert set(KAFKA_REQUESTS) <= defined_names(modules()["s3_archive.io.kafka"])
    bad = [f"{p.relative_to(PACKAGE.parent)}:{n.lineno}: .{n.func.attr}(...)" for p in defs_modules().values()
           for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call)
           and isinstance(n.func, ast.Attribute) and n.func.attr in KAFKA_REQUESTS + S3_REQUESTS]
    assert not bad, "defs/ asks Kafka for offsets and S3 for objects only through the stages' functions:\n" + \
        "\n".join(bad)


MAX_PARAMETERS = 8  # self/cls not counted; *args and **kwargs counted
MAX_FUNCTION_LINES = 80  # from `def` to the last line, nested functions included


def functions() -> dict[str, tuple[int, int]]:
    """`file::qualified name` of every function and method in the package -> (parameters, lines)."""
    out: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, path: str, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                named = [x for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                params = len(named) + (a.vararg is not None) + (a.kwarg is not None)
                out[f"{path}::{'.'.join([*scope, child.name])}"] = (params, child.end_lineno - child.lineno + 1)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, path, [*scope, child.name])
            else:
                visit(child, path, scope)

    for p in modules().values():
        visit(ast.parse(p.read_text()), str(p.relative_to(PACKAGE.parent)), [])
    return out


def test_no_function_takes_more_than_eight_parameters_or_runs_past_eighty_lines():
    """What travels together is one value (a run's context, a location, an options value; test hooks apart), and a
    long function is split into named steps (docs/architecture.md)."""
    found = functions()
    wide = [f"{name}: {params} parameters" for name, (params, _) in found.items()
            if params > MAX_PARAMETERS]
    long = [f"{name}: {lines} lines" for name, (_, lines) in found.items()
            if lines > MAX_FUNCTION_LINES]
    assert not wide + long, (f"over {MAX_PARAMETERS} parameters or {MAX_FUNCTION_LINES} lines:\n"
                             + "\n".join(wide + long))


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
    found = cycles({m: {i for i, _ in imports(p) if i in mods and i != m} for m, p in mods.items()})
    assert not found, "\n".join(found)


def test_bench_imports_no_private_name_of_another_module():
    mods = bench_modules()
    bad = [f"{p.relative_to(BENCH.parent)}:{line}: {imp}" for p in mods.values() for imp, line in imports(p)
           if imp.rsplit(".", 1)[0] in mods and imp.rsplit(".", 1)[-1].startswith("_")]
    assert not bad, "\n".join(bad)
