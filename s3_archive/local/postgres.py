"""A PostgreSQL server for the Dagster instance (run, event and schedule storage), on 127.0.0.1.

It is Debian's `postgresql` package (installed by `scripts/setup` when no server is found), run from its own
binaries: `initdb` into a data directory of the stack, then `postgres` on a free port, stopped by PID. The database
user's password is generated at `initdb` and kept in a file next to the data (mode 0600); it never appears on a
command line.

PostgreSQL refuses to run as root. As root (containers, CI) it is started in a user namespace in which it is an
ordinary user (`unshare --user --map-user`); the files it writes are still root's, so the data can stay under the
stack's directory (which other users may not be able to reach).

`python -m s3_archive.local.postgres find` prints the server's bin directory, or exits 1 when there is none
(scripts/setup-postgres installs the package then).
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from s3_archive.local.processes import StackError, ensure_port_free, free_port, spawn, stop_pid, wait_until

DEBIAN_ROOT = Path("/usr/lib/postgresql")  # Debian/Ubuntu: /usr/lib/postgresql/<major>/bin
SERVER_BINARIES = ("initdb", "postgres")
DEFAULT_USER = "dagster"
DEFAULT_DATABASE = "dagster"


def _has_server(d: Path) -> bool:
    return all((d / b).is_file() and os.access(d / b, os.X_OK) for b in SERVER_BINARIES)


def find_bin_dir() -> Path | None:
    """The directory of the PostgreSQL server binaries (`initdb`, `postgres`), or None when there is none.

    In this order: `$S3_ARCHIVE_PG_BIN`; the newest major version under `$S3_ARCHIVE_PG_ROOT` (default
    /usr/lib/postgresql, where Debian puts them: they are not on PATH there); an `initdb` on PATH."""
    given = os.environ.get("S3_ARCHIVE_PG_BIN")
    if given:
        d = Path(given).expanduser()
        if not _has_server(d):
            raise StackError(f"S3_ARCHIVE_PG_BIN={given}: no {' and '.join(SERVER_BINARIES)} there")
        return d
    root = Path(os.environ.get("S3_ARCHIVE_PG_ROOT", DEBIAN_ROOT))
    versions = sorted((d for d in root.glob("*/bin") if re.fullmatch(r"[0-9]+(\.[0-9]+)?", d.parent.name)),
                      key=lambda d: tuple(int(x) for x in d.parent.name.split(".")), reverse=True)
    for d in versions:
        if _has_server(d):
            return d
    initdb = shutil.which("initdb")
    if initdb is not None and _has_server(Path(initdb).resolve().parent):
        return Path(initdb).resolve().parent
    return None


def bin_dir() -> Path:
    found = find_bin_dir()
    if found is None:
        raise StackError("no PostgreSQL server found (initdb and postgres under /usr/lib/postgresql/<version>/bin or "
                         "on PATH); run `scripts/setup` (it installs Debian's `postgresql` package) or set "
                         "S3_ARCHIVE_PG_BIN to the directory of the server binaries")
    return found


def _as_unprivileged(cmd: list[str]) -> list[str]:
    """`cmd` as it must run here: as is, or, as root, in a user namespace where it is an ordinary user."""
    if os.geteuid() != 0:
        return cmd
    unshare = shutil.which("unshare")
    if unshare is None:
        raise StackError("PostgreSQL does not run as root and `unshare` (util-linux) is not on PATH to start it as "
                         "an ordinary user; run as another user or install util-linux")
    # A user that exists (initdb looks its name up): Debian's package creates `postgres`; `nobody` is everywhere.
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
            break
        except KeyError:
            continue
    else:
        raise StackError("neither a `postgres` nor a `nobody` user exists to run PostgreSQL as")
    return [unshare, "--user", f"--map-user={user.pw_uid}", f"--map-group={user.pw_gid}", *cmd]


@dataclass
class PostgresServer:
    """initdb (once) into `data_dir/data`, then `postgres` listening on 127.0.0.1 only (no Unix socket)."""

    data_dir: Path
    port: int = 0
    user: str = DEFAULT_USER
    database: str = DEFAULT_DATABASE
    settings: dict[str, str] = field(default_factory=dict)  # extra `postgres -c` settings, e.g. fsync=off in tests
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn
    proc: subprocess.Popen | None = None

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "data"

    @property
    def password_file(self) -> Path:
        return self.data_dir / "password"

    @property
    def log(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    def env(self) -> dict[str, str]:
        """What deploy/dagster.postgres.yaml reads (the password too: give it to Dagster's processes only)."""
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USERNAME": self.user,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": self.database}

    def _initdb(self, bindir: Path) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.password_file.exists():
            self.password_file.touch(mode=0o600)
            self.password_file.write_text(secrets.token_urlsafe(24) + "\n")
        # initdb reads the password from a file it must be able to open: a copy inside the directory it creates
        # would not exist yet, so it is given the stack's file (root-owned is fine in the user namespace).
        done = subprocess.run(
            _as_unprivileged([str(bindir / "initdb"), "-D", str(self.pgdata), "-U", self.user,
                              f"--pwfile={self.password_file}", "--auth=scram-sha-256", "-E", "UTF8",
                              "--locale=C", "--no-instructions"]),
            capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            shutil.rmtree(self.pgdata, ignore_errors=True)  # a half-made cluster would fail the next start
            raise StackError(f"initdb into {self.pgdata} failed: {(done.stderr or done.stdout).strip()[-800:]}")

    def start(self, timeout: float = 60.0) -> None:
        bindir = bin_dir()
        if self.port:
            ensure_port_free(self.port, "PostgreSQL")
        else:
            self.port = free_port()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bindir)
        settings = {"listen_addresses": "127.0.0.1", "port": str(self.port), "unix_socket_directories": "",
                    **self.settings}
        cmd = [str(bindir / "postgres"), "-D", str(self.pgdata), *[a for k, v in settings.items()
                                                                   for a in ("-c", f"{k}={v}")]]
        self.proc = spawn(_as_unprivileged(cmd), self.log, detached=self.detached)
        try:
            wait_until(self._ready, timeout, self.proc, f"PostgreSQL on 127.0.0.1:{self.port}", self.log)
            self.create_database(self.database)
        except BaseException:
            self.stop()
            raise

    def connect(self, database: str = "postgres"):
        import psycopg2

        return psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                dbname=database, connect_timeout=2)

    def _ready(self) -> bool:
        self.connect().close()
        return True

    def create_database(self, name: str) -> None:
        """Create database `name` unless it exists (one per Dagster instance)."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"database name must match [a-z_][a-z0-9_]{{0,62}}, got {name!r}")
        conn = self.connect()
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None


if __name__ == "__main__":
    if sys.argv[1:] != ["find"]:
        sys.exit("usage: python -m s3_archive.local.postgres find")
    found = find_bin_dir()
    if found is None:
        sys.exit(1)
    print(found)
