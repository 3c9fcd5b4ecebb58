"""A deadline of ours around a blocking call of a client library that can ignore its own timeout.

librdkafka's transactional calls (`send_offsets_to_transaction`, `commit_transaction`, `init_transactions`,
`abort_transaction`) can block far past the timeout they are given while the transaction coordinator is gone
(upstream librdkafka #5456, #5511): a restore then sat in STARTED for 9+ minutes. `call_with_deadline` runs such a
call in a daemon thread and waits for it at most `deadline_s`. Past that it raises `DeadlineExceeded`; the call is
left running in its thread (a C call cannot be interrupted), and because the thread is a daemon thread it never
keeps the process from exiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from s3_archive.model.errors import DeadlineExceeded

T = TypeVar("T")


def call_with_deadline(fn: Callable[..., T], *args: Any, deadline_s: float, what: str) -> T:
    """`fn(*args)`, its result or its exception; `DeadlineExceeded("<what> did not return within <deadline>s")`
    if it has not returned after `deadline_s` seconds. `what` says what was called, on which cluster."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
            box["error"] = e
        finally:
            done.set()

    # Not a ThreadPoolExecutor: its threads are joined when the interpreter exits, so a stuck call would keep the
    # process (a Dagster run worker) alive.
    threading.Thread(target=run, name=f"s3-archive-deadline:{getattr(fn, '__name__', 'call')}", daemon=True).start()
    if not done.wait(deadline_s):
        raise DeadlineExceeded(f"{what} did not return within {deadline_s:g}s (our deadline); the call is "
                               "abandoned")
    if "error" in box:
        raise box["error"]
    return box["value"]
