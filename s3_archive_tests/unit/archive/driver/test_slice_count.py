"""How many slices (tasks, objects) a window is cut into: a function of the window and the settings, never of the
run it is in, so every attempt of a window writes the same objects."""

from dataclasses import replace

from s3_archive.archive.driver.coordinator import MAX_SLICES, SLICE_RECORDS, slice_count
from s3_archive.archive.driver.output import Output
from s3_archive.archive.protocol import slices_of
from s3_archive.config.archive import ArchiveConfig
from s3_archive.model.windows import OffsetWindow

OUT = Output.of(ArchiveConfig(name="a", topics=["t"], bucket="bucket"))


def test_librdkafka_cuts_one_slice_per_slice_records_up_to_the_cap():
    assert OUT.read_path == "librdkafka"
    assert slice_count(OUT, None, 10) == 1
    assert slice_count(OUT, None, 2 * SLICE_RECORDS - 1) == 1
    assert slice_count(OUT, None, 2 * SLICE_RECORDS) == 2
    assert slice_count(OUT, None, 100 * SLICE_RECORDS) == MAX_SLICES


def test_spark_path_is_one_slice_and_min_partitions_is_taken_as_it_is():
    assert slice_count(replace(OUT, read_path="spark"), None, 10 * SLICE_RECORDS) == 1
    assert slice_count(OUT, "3", 10) == 3
    assert slice_count(replace(OUT, read_path="spark"), "2", 10 * SLICE_RECORDS) == 2


def test_slices_cover_the_window_in_order_and_alike_each_time():
    w = OffsetWindow(0, 1000, 1000 + 2 * SLICE_RECORDS + 7)
    first = slices_of(w, w.start, slice_count(OUT, None, w.end - w.start))
    assert [(s.start, s.end, s.index, s.count) for s in first] == [
        (1000, 1000 + SLICE_RECORDS + 3, 0, 2), (1000 + SLICE_RECORDS + 3, w.end, 1, 2)]
    assert slices_of(w, w.start, slice_count(OUT, None, w.end - w.start)) == first
