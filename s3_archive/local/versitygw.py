"""versitygw (Versity's S3 gateway, Apache-2.0) over a local directory, on 127.0.0.1, as a child process: a second
real S3-compatible server beside moto, which honours conditional writes (If-None-Match / If-Match on PutObject,
CompleteMultipartUpload and DeleteObject, checked under a per-key lock). The tests run the commit protocol against
it. `scripts/fetch-versitygw` (run by `make setup`) builds the pinned version into the cache.
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from s3_archive.io.paths import home
from s3_archive.local.processes import StackError, free_port, spawn, stop_pid, wait_until

VERSITYGW_VERSION = "v1.8.0"


def versitygw_binary() -> Path:
    """The built binary; a clear error if `scripts/fetch-versitygw` has not run."""
    path = home() / "bin" / f"versitygw-{VERSITYGW_VERSION}" / "versitygw"
    if not path.is_file():
        raise StackError(f"versitygw {VERSITYGW_VERSION} is not built ({path} is missing); run "
                         "`scripts/fetch-versitygw` (or `make setup`), which builds it with Go")
    return path


@dataclass
class VersityGateway:
    """The gateway's posix backend: each bucket a directory under `data_dir/buckets`, metadata in xattrs. With
    `versioning`, object versions are kept under `data_dir/versions`: buckets can be versioned, and created with
    S3 Object Lock (docs/compliance.md)."""

    data_dir: Path
    access_key_id: str
    secret_access_key: str
    port: int = 0
    proc: subprocess.Popen | None = None
    versioning: bool = False

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self.port = self.port or free_port()
        buckets = self.data_dir / "buckets"
        buckets.mkdir(parents=True, exist_ok=True)
        log = self.data_dir / "versitygw.log"
        # Credentials through the environment, not the command line: the process list shows no secret.
        env = {"ROOT_ACCESS_KEY_ID": self.access_key_id, "ROOT_SECRET_ACCESS_KEY": self.secret_access_key}
        versions = self.data_dir / "versions"
        if self.versioning:
            versions.mkdir(parents=True, exist_ok=True)
        self.proc = spawn([str(versitygw_binary()), "--port", f"127.0.0.1:{self.port}", "--quiet", "posix",
                           *(["--versioning-dir", str(versions)] if self.versioning else []), str(buckets)],
                          log, env=env)
        try:
            wait_until(self._ready, timeout, self.proc, f"versitygw on {self.endpoint_url}", log)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.endpoint_url}/", timeout=2)
        except urllib.error.HTTPError:
            return True  # an S3 error (unsigned request refused): the gateway answers
        return True

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
