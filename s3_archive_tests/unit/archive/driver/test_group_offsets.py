"""When Kafka's high watermark settles how far a partition's committed windows reach (group_offsets.py::settled_end),
the run writes the group offset without listing the manifests; otherwise only the manifests can say."""

from s3_archive.archive.driver.group_offsets import settled_end
from s3_archive.model.windows import OffsetWindow


def _ws(*bounds: int) -> list[OffsetWindow]:
    return [OffsetWindow(0, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def test_the_run_s_windows_reaching_the_high_watermark_settle_it():
    assert settled_end(100, _ws(100, 150, 200), 200) == (True, 200)
    assert settled_end(None, _ws(0, 50, 100), 100) == (True, 100)  # no group offset yet: from offset 0
    assert settled_end(100, list(reversed(_ws(100, 150, 200))), 200) == (True, 200)  # in any order


def test_a_group_offset_at_the_high_watermark_moves_no_further():
    assert settled_end(200, _ws(0, 100), 200) == (True, None)
    assert settled_end(250, [], 200) == (True, None)


def test_windows_short_of_the_high_watermark_need_the_manifests():
    assert settled_end(100, _ws(100, 150), 200) == (False, None)  # another run may have committed [150, …)


def test_a_hole_or_a_start_elsewhere_needs_the_manifests():
    assert settled_end(100, [OffsetWindow(0, 100, 150), OffsetWindow(0, 160, 200)], 200) == (False, None)
    assert settled_end(50, _ws(100, 200), 200) == (False, None)  # [50, 100) may be committed by another run
    assert settled_end(None, _ws(10, 200), 200) == (False, None)  # the partition's first manifest may come before


def test_older_windows_of_the_run_are_passed_over():
    assert settled_end(100, [OffsetWindow(0, 0, 100), *_ws(100, 200)], 200) == (True, 200)
