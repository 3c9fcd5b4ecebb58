"""bench.tools.formats_ab's choice of formats and its summary: parquet, the reference, is always measured."""

from __future__ import annotations

import pytest

from bench.tools.formats_ab import measured_formats, summary

pytestmark = pytest.mark.unit


def test_parquet_is_measured_even_when_not_named():
    assert measured_formats("jsonl,json") == ["parquet", "jsonl", "json"]
    assert measured_formats("jsonl,parquet") == ["jsonl", "parquet"]


def test_an_unknown_format_is_one_clear_error():
    with pytest.raises(SystemExit, match="unknown format 'jsonx'; allowed: "):
        measured_formats("parquet,jsonx")


def test_the_summary_gives_each_kind_its_ratio_to_the_reference():
    lines = summary({"parquet": [2.0, 2.4, 2.2], "jsonl": [2.75, 3.0, 2.5], "registry-raw": [1.0],
                     "registry-decoded": [2.0]})
    assert lines == ["parquet: median 2.20s (min 2.00, max 2.40); parquet / this = 1.00",
                     "jsonl: median 2.75s (min 2.50, max 3.00); parquet / this = 0.80",
                     "registry-raw: median 1.00s (min 1.00, max 1.00); raw / this = 1.00",
                     "registry-decoded: median 2.00s (min 2.00, max 2.00); raw / this = 0.50"]


def test_without_the_reference_the_summary_gives_no_ratio():
    assert summary({"jsonl": [3.0]}) == ["jsonl: median 3.00s (min 3.00, max 3.00)"]
