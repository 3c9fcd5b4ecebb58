"""One archive parsed from YAML-shaped settings as `parse_settings` reads them, and the error it raises: the
config tests' two helpers."""

import pytest

from s3_archive.config.settings import parse_settings
from s3_archive.model.errors import InvalidConfig


def cfg(**kw):
    """Archive `a` of topic `t` in bucket `b-1`, with `kw` as its settings."""
    return parse_settings({"archives": [{"name": "a", "topics": ["t"], "bucket": "b-1", **kw}]}).archives[0]


def err(**kw) -> str:
    """The InvalidConfig message of archive `a` with `kw` as its settings."""
    with pytest.raises(InvalidConfig) as e:
        cfg(**kw)
    return str(e.value)
