"""call_with_deadline: a blocking call that ignores its own timeout fails at our deadline, and never keeps the
process from exiting."""

import subprocess
import sys
import threading
import time

import pytest

from s3_archive.io.deadline import call_with_deadline
from s3_archive.model.errors import DeadlineExceeded


def test_a_call_within_the_deadline_returns_its_result_or_raises_its_error():
    assert call_with_deadline(lambda a, b: a + b, 1, 2, deadline_s=5, what="add") == 3
    with pytest.raises(KeyError, match="k"):
        call_with_deadline({}.__getitem__, "k", deadline_s=5, what="lookup")


def test_a_call_past_the_deadline_raises_naming_it_and_the_deadline():
    blocked = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"send_offsets on Kafka at h:9 did not return within 0.5s"):
        call_with_deadline(blocked.wait, deadline_s=0.5, what="send_offsets on Kafka at h:9")
    assert time.monotonic() - t0 < 2
    blocked.set()


_STUCK = """
import time
from s3_archive.io.deadline import call_with_deadline
from s3_archive.model.errors import DeadlineExceeded
try:
    call_with_deadline(time.sleep, 3600, deadline_s=0.2, what="a call that never returns")
except DeadlineExceeded as e:
    print(e)
    raise SystemExit(3)
"""


def test_an_abandoned_call_does_not_keep_the_process_alive():
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _STUCK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "a call that never returns did not return within 0.2s" in proc.stdout
    assert time.monotonic() - t0 < 30
