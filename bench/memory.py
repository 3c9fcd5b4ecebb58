"""Memory as the window grows (the page's "Memory as the window grows" and its target): one window of partition 1
per size (`MEMORY_MULTIPLES`: 1/16, 1/4 and all of a partition), each in a fresh worker process with the default
JVM flags (after a cold and a warm one-record run): the JVM's peak resident set (VmHWM; in local mode the driver and
the executors are one JVM), its sampled maximum during the window's run, and the Python driver's peak."""

from __future__ import annotations

from typing import Any

from bench import workload as wl
from bench.common import Setup, say
from bench.config import BUCKET, MEMORY_MULTIPLES, TOPIC


def peakmem_by_window_size(s: Setup, one_topic: str) -> tuple[int, dict[int, dict[str, Any]]]:
    """(records of the 1x window, per multiple: the worker's `fresh` answer)."""
    base = s.per_partition // max(MEMORY_MULTIPLES)  # the largest window is a whole partition
    memory: dict[int, dict[str, Any]] = {}
    for mult in MEMORY_MULTIPLES:
        out = s.fresh("fresh.log", {"jvm_profile": "short"}, cmd="fresh", one_topic=one_topic,
                      prefix=f"fresh-{mult}x/", topic=TOPIC, partition=1, records=base * mult)
        memory[mult] = out
        wl.empty_prefix(s.s3, BUCKET, f"fresh-{mult}x/")
        say(f"memory {mult}x: window of {base * mult:,} records ({base * mult * wl.record_bytes() / 1e6:.0f} MB)"
            f": JVM peak RSS {out['jvm_peak_mb']:.0f} MB (sampled max {out['jvm_rss_max_mb']:.0f} MB), Python "
            f"driver peak {out['python_peak_mb']:.0f} MB, PySpark worker peak {out.get('workers_peak_mb', 0):.0f} MB, "
            f"{out['seconds']:.1f}s")
    return base, memory
