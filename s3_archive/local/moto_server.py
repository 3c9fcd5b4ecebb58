"""moto's server mode (S3, Glue, Athena, ...) on 127.0.0.1, as a child process so other processes can reach it.

moto keeps its state in memory. With `recording`, the server keeps it across restarts with moto's own recorder:
every request is appended to that file (`MOTO_ENABLE_RECORDING`), and the next start replays the file's requests
that change state, in order, before anyone else connects, so the bucket is what it was when the server stopped.
The replay is ours, not moto's `/moto-api/recorder/replay-recording`: a multipart upload gets a new random id when
it is created again, and the recorded parts and completion name the old one, so each old id is mapped to the new
(moto's own replay loses every multipart object).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from s3_archive.local.processes import (
    StackError,
    ensure_port_free,
    free_port,
    purge_command,
    spawn,
    stop_pid,
    wait_until,
)

# Requests that change no state: dropped from the recording before a replay, so it grows with writes only.
_READS = ("GET", "HEAD", "OPTIONS")


@dataclass
class MotoServer:
    data_dir: Path
    port: int = 0
    env: dict[str, str] | None = None  # e.g. INITIAL_NO_AUTH_ACTION_COUNT=0 to make moto check credentials
    tls: tuple[Path, Path] | None = None  # (certificate, key) as PEM: serve HTTPS, like an S3-compatible server
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn
    recording: Path | None = None  # moto's request log: replayed at start, appended to while running
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
        env = dict(self.env or {})
        replay = False
        if self.recording is not None:
            replay = compact_recording(self.recording) > 0
            env |= {"MOTO_ENABLE_RECORDING": "true", "MOTO_RECORDER_FILEPATH": str(self.recording)}
        self.proc = spawn(cmd, log, env=env, detached=self.detached)
        try:
            wait_until(self._ready, timeout, self.proc, f"the moto server on {self.endpoint_url}", log)
            if replay:
                self._replay()
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        probe = ssl.create_default_context()
        probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE  # only: is it up? Clients verify.
        with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/data.json", timeout=2,
                                    context=probe if self.tls else None) as r:
            return r.status == 200

    def _replay(self) -> None:
        try:
            replay_recording(self.recording, self.port)
        except (OSError, ValueError, KeyError) as e:
            raise StackError(f"the moto server could not replay its recording {self.recording} ({e}); to start "
                             f"over with empty local state: `{purge_command()}`") from None

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None


def compact_recording(path: Path) -> int:
    """Keep only the recorded requests that change state, one a line; the file stays private (it holds request
    headers). Returns how many requests are left.

    moto writes an entry and its newline in two writes, so requests of two threads can share a line (both entries,
    then both newlines): each line is read as the JSON objects it holds. A line cut short when the server was
    killed mid-write ends in a part that is no object: dropped."""
    kept: list[str] = []
    decoder = json.JSONDecoder()
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            at = 0
            while at < len(line):
                try:
                    entry, end = decoder.raw_decode(line, at)
                except json.JSONDecodeError:
                    break
                if isinstance(entry, dict) and entry.get("method") not in _READS:
                    kept.append(json.dumps(entry) + "\n")
                at = end
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.writelines(kept)
    tmp.replace(path)
    return len(kept)


_UPLOAD_ID = re.compile(r"<UploadId>([^<]+)</UploadId>")


def replay_recording(path: Path, port: int) -> None:
    """Send the recorded requests again, in order, to the server on `port`, the recording off meanwhile (moto's
    `stop-recording`); a multipart upload's recorded id is replaced by the id the server gives it now (per object,
    in the order the uploads were created and first used)."""
    control = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    control.request("POST", "/moto-api/recorder/stop-recording")
    control.getresponse().read()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    created: dict[str, list[str]] = {}  # object path -> new upload ids not yet matched to a recorded one
    new_id: dict[str, str] = {}  # recorded upload id -> the replayed upload's
    try:
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            url = urllib.parse.urlsplit(entry["url"])
            params = url.query.split("&") if url.query else []
            old = next((urllib.parse.unquote(p[len("uploadId="):]) for p in params if p.startswith("uploadId=")), None)
            if old is not None:
                if old not in new_id and created.get(url.path):
                    new_id[old] = created[url.path].pop(0)
                if old in new_id:
                    params = [f"uploadId={urllib.parse.quote(new_id[old], safe='')}" if p.startswith("uploadId=")
                              else p for p in params]
            body = base64.b64decode(entry["body"]) if entry.get("body_encoded") else (entry.get("body") or "").encode()
            headers = {k: v for k, v in entry["headers"].items()
                       if k.lower() not in ("content-length", "transfer-encoding", "connection", "expect")}
            conn.request(entry["method"], url.path + ("?" + "&".join(params) if params else ""), body=body,
                         headers=headers)
            reply = conn.getresponse().read()
            if entry["method"] == "POST" and ("uploads" in params or "uploads=" in params):
                made = _UPLOAD_ID.search(reply.decode(errors="replace"))
                if made:
                    created.setdefault(url.path, []).append(made[1])
    finally:
        conn.close()
        control.request("POST", "/moto-api/recorder/start-recording")
        control.getresponse().read()
        control.close()
