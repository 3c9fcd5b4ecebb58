"""The machine's process list as `ps -eo args` shows it (`/proc/*/cmdline`), for tests proving that no secret is on
any command line while a run goes on."""

from __future__ import annotations

import threading
from pathlib import Path


def cmdlines() -> dict[int, tuple[int, str]]:
    """Every process on the machine: pid -> (parent pid, command line)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d.name)] = (ppid, cmd)
    return out


class CommandLineWatch:
    """Reads every process's command line every `interval` seconds while in its `with` block: `seen` holds every
    command line seen (pid -> command line), `leaks` those holding one of `secrets`."""

    def __init__(self, secrets: list[str], interval: float = 0.2) -> None:
        assert all(secrets), "an empty secret matches every command line"
        self.secrets, self.interval = secrets, interval
        self.seen: dict[int, str] = {}
        self.leaks: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _look(self) -> None:
        for pid, (_, cmd) in cmdlines().items():
            self.seen[pid] = cmd
            if any(s in cmd for s in self.secrets):
                self.leaks[pid] = cmd[:300]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._look()
            self._stop.wait(self.interval)

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    def seen_with(self, text: str) -> list[str]:
        return [cmd for cmd in self.seen.values() if text in cmd]
