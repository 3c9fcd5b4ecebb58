"""The assets' descriptions as the asset list shows them: their first line is plain text (the list does not render
markdown, so a backtick there is shown as one)."""

from __future__ import annotations

from s3_archive.config.settings import parse_settings
from s3_archive.definitions import build_defs


def test_no_backticks_in_the_first_line_of_any_asset_description():
    settings = parse_settings({"archives": [
        {"name": "shop", "topics": ["orders"], "bucket": "lake", "catalog": {"database": "lake_db"},
         "lifecycle": {"expiration_days": 30},
         "restore_targets": [{"name": "dr", "target_topic": "{topic}.restored"}]}]})
    defs = build_defs(settings)
    firsts = {k.to_user_string(): (a.descriptions_by_key.get(k) or "").splitlines()[0]
              for a in defs.assets for k in a.keys}
    assert len(firsts) >= 4, firsts
    assert not {k: line for k, line in firsts.items() if "`" in line}
