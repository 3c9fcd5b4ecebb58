"""moto's server mode (S3, Glue, Athena, ...) on 127.0.0.1, as a child process so other processes can reach it."""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from s3_archive.local.processes import ensure_port_free, free_port, spawn, stop_pid, wait_until


@dataclass
class MotoServer:
    data_dir: Path
    port: int = 0
    env: dict[str, str] | None = None  # e.g. INITIAL_NO_AUTH_ACTION_COUNT=0 to make moto check credentials
    tls: tuple[Path, Path] | None = None  # (certificate, key) as PEM: serve HTTPS, like an S3-compatible server
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn
    proc: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        if self.port:
            ensure_port_free(self.port, "the moto server")
        else:
            self.port = free_port()
        log = self.data_dir / "moto.log"
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        if self.tls:
            cmd += ["-c", str(self.tls[0]), "-k", str(self.tls[1])]
        self.proc = spawn(cmd, log, env=self.env, detached=self.detached)
        try:
            wait_until(self._ready, timeout, self.proc, f"the moto server on {self.endpoint_url}", log)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        probe = ssl.create_default_context()
        probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE  # only: is it up? Clients verify.
        with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/data.json", timeout=2,
                                    context=probe if self.tls else None) as r:
            return r.status == 200

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
