"""Which windows may be retired: a contiguous prefix per Kafka partition, never its last window (pure)."""


from s3_archive.archive.retirement import extend, retire_candidates
from s3_archive.model.windows import OffsetWindow as W


def test_from_the_first_window_up_to_but_not_the_last():
    ws = [W(0, 0, 10), W(0, 10, 20), W(0, 20, 30), W(1, 5, 8)]
    assert retire_candidates(ws, {}) == {0: ([], [W(0, 0, 10), W(0, 10, 20)])}  # partition 1 has only its last


def test_continuing_the_retired_range_and_stopping_at_a_hole():
    ws = [W(0, 100, 110), W(0, 110, 120), W(0, 130, 140), W(0, 140, 150)]
    assert retire_candidates(ws, {0: W(0, 0, 100)}) == {0: ([], [W(0, 100, 110), W(0, 110, 120)])}
    assert retire_candidates(ws, {0: W(0, 0, 90)}) == {}  # a hole right after the range: nothing


def test_windows_added_back_inside_the_range_are_retired_again():
    ws = [W(0, 30, 40), W(0, 100, 110), W(0, 110, 120)]
    assert retire_candidates(ws, {0: W(0, 0, 100)}) == {0: ([W(0, 30, 40)], [W(0, 100, 110)])}


def test_extend():
    assert extend(None, W(2, 5, 9)) == W(2, 5, 9)
    assert extend(W(2, 0, 5), W(2, 5, 9)) == W(2, 0, 9)
    assert extend(W(2, 0, 50), W(2, 5, 9)) == W(2, 0, 50)
