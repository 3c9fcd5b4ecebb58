"""Where the offsets sensor thinks each partition's windows end: from every key (no cursor), from the keys added
since its cursor's position, and never short of a window that exists (an in-memory Dagster instance, no Kafka)."""

import dagster as dg

from s3_archive.archive.cursor import SensorCursor, Tail
from s3_archive.defs.archive.instance import Retired, read_retired, record_retired
from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.defs.archive.sensors import window_ends
from s3_archive.model.windows import OffsetWindow

TOPIC = "ends"


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, msg: str) -> None:
        self.warnings.append(msg)


def add(instance: dg.DagsterInstance, *windows: OffsetWindow | str) -> None:
    instance.add_dynamic_partitions(window_partitions(TOPIC).name,
                                    [w if isinstance(w, str) else w.key for w in windows])


def test_a_cursor_reads_only_the_keys_added_since_and_agrees_with_a_full_read():
    instance = dg.DagsterInstance.ephemeral()
    add(instance, OffsetWindow(0, 0, 10), OffsetWindow(1, 0, 5), OffsetWindow(0, 10, 20))
    first = window_ends(instance, TOPIC, None, Log())
    assert first.next == {0: 20, 1: 5}

    add(instance, OffsetWindow(1, 5, 9), "junk")
    log = Log()
    second = window_ends(instance, TOPIC, first, log)
    assert second.next == {0: 20, 1: 9} == window_ends(instance, TOPIC, None, Log()).next
    assert log.warnings == ["topic 'ends': ignoring partition key 'junk': not a window key"]  # only the new key read
    assert window_ends(instance, TOPIC, second, Log()) == second  # nothing new: same position, same ends


def test_a_stale_cursor_sees_every_key_added_since_it_so_no_window_is_cut_twice():
    instance = dg.DagsterInstance.ephemeral()
    add(instance, OffsetWindow(0, 0, 10))
    stale = window_ends(instance, TOPIC, None, Log())
    add(instance, OffsetWindow(0, 10, 20))  # a tick evaluated with `stale` whose new cursor was lost
    add(instance, OffsetWindow(0, 20, 30))
    assert window_ends(instance, TOPIC, stale, Log()).next == {0: 30}


def test_with_no_cursor_the_retired_ranges_count_too():
    instance = dg.DagsterInstance.ephemeral()
    add(instance, OffsetWindow(0, 100, 110))
    record_retired(instance, TOPIC, Retired({0: OffsetWindow(0, 0, 100), 1: OffsetWindow(1, 0, 40)}, 14), "test")
    assert read_retired(instance, TOPIC) == Retired({0: OffsetWindow(0, 0, 100), 1: OffsetWindow(1, 0, 40)}, 14)
    assert window_ends(instance, TOPIC, None, Log()).next == {0: 110, 1: 40}


def test_the_cursor_keeps_the_tails():
    c = SensorCursor(tails={"t": Tail("abc", {3: 7, 0: 1}), "u": Tail(None, {})})
    assert SensorCursor.parse(c.dump()) == c
    assert SensorCursor.parse('{"cron_tick": null, "starts": {}}').tails == {}  # a cursor from before tails
