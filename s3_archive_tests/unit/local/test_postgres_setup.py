"""Finding PostgreSQL's server binaries, and scripts/setup-postgres's install branch (with a stand-in apt-get, so
nothing is installed or removed on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from s3_archive.local.postgres import find_bin_dir
from s3_archive.local.processes import StackError

REPO = Path(__file__).resolve().parents[3]


def server(d: Path) -> Path:
    d.mkdir(parents=True)
    for b in ("initdb", "postgres"):
        (d / b).write_text("#!/bin/sh\n")
        (d / b).chmod(0o755)
    return d


@pytest.fixture
def pg_root(monkeypatch, tmp_path):
    """An environment where PATH has no PostgreSQL server and the Debian root is empty."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("S3_ARCHIVE_PG_BIN", raising=False)
    monkeypatch.setenv("S3_ARCHIVE_PG_ROOT", str(tmp_path / "lib"))
    return tmp_path / "lib"


def test_the_newest_debian_major_version_wins(pg_root):
    assert find_bin_dir() is None
    server(pg_root / "9.6" / "bin")
    newest = server(pg_root / "15" / "bin")
    (pg_root / "16" / "bin").mkdir(parents=True)  # a client-only install: no server binaries
    assert find_bin_dir() == newest


def test_an_explicit_bin_dir_must_hold_the_server(pg_root, monkeypatch, tmp_path):
    monkeypatch.setenv("S3_ARCHIVE_PG_BIN", str(tmp_path / "nothing"))
    with pytest.raises(StackError, match="S3_ARCHIVE_PG_BIN=.*nothing: no initdb and postgres there"):
        find_bin_dir()
    monkeypatch.setenv("S3_ARCHIVE_PG_BIN", str(server(tmp_path / "pg")))
    assert find_bin_dir() == tmp_path / "pg"


def run_setup(tmp_path: Path, pg_root: Path) -> tuple[subprocess.CompletedProcess, str]:
    """scripts/setup-postgres with a stand-in apt-get (and sudo) that records its calls and 'installs' the server
    binaries under the Debian root."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    calls = tmp_path / "apt-calls"
    (fake / "apt-get").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'if [ "$1" = install ]; then mkdir -p {pg_root}/15/bin && for b in initdb postgres; do '
        f'printf "#!/bin/sh\\n" > {pg_root}/15/bin/$b; chmod +x {pg_root}/15/bin/$b; done; fi\n')
    (fake / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:/usr/bin:/bin", "S3_ARCHIVE_PG_ROOT": str(pg_root),
           "S3_ARCHIVE_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    env.pop("S3_ARCHIVE_PG_BIN", None)
    done = subprocess.run([str(REPO / "scripts" / "setup-postgres")], env=env, capture_output=True, text=True,
                          timeout=60)
    return done, calls.read_text() if calls.exists() else ""


def test_setup_installs_debians_package_when_no_server_is_found(tmp_path):
    done, calls = run_setup(tmp_path, tmp_path / "lib")
    assert done.returncode == 0, done.stderr
    assert calls.splitlines() == ["update -qq", "install -y -qq --no-install-recommends postgresql"]
    assert f"setup: PostgreSQL server in {tmp_path / 'lib' / '15' / 'bin'}" in done.stdout


def test_setup_installs_nothing_when_a_server_is_there(tmp_path):
    server(tmp_path / "lib" / "15" / "bin")
    done, calls = run_setup(tmp_path, tmp_path / "lib")
    assert done.returncode == 0, done.stderr
    assert calls == ""
    assert done.stdout.strip() == f"setup: PostgreSQL server in {tmp_path / 'lib' / '15' / 'bin'}"


def test_the_stack_env_names_postgres_but_not_its_password():
    from s3_archive.local.stack import StackState

    plain = StackState("127.0.0.1:1", "http://127.0.0.1:2", "b", 10, 11)
    assert not any(k.startswith("DAGSTER_PG_") for k in plain.env())
    with_pg = StackState("127.0.0.1:1", "http://127.0.0.1:2", "b", 10, 11, postgres_pid=12, postgres_port=5433)
    pg = {k: v for k, v in with_pg.env().items() if k.startswith("DAGSTER_PG_")}
    assert pg == {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": "5433", "DAGSTER_PG_USERNAME": "dagster",
                  "DAGSTER_PG_DB": "dagster"}
