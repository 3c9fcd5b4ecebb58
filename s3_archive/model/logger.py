"""`Logger`: what a stage needs of a log. Dagster's `context.log`, a `logging.Logger` and a test's list-backed logger
all fit; the stages import no Dagster, so they name this instead of `Any`."""

from __future__ import annotations

from typing import Protocol


class Logger(Protocol):
    def debug(self, msg: str, /) -> object: ...

    def info(self, msg: str, /) -> object: ...

    def warning(self, msg: str, /) -> object: ...

    def error(self, msg: str, /) -> object: ...
