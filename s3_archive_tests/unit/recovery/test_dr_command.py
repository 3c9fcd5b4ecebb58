"""`s3-archive dr`'s arguments."""

from __future__ import annotations

import pytest

from s3_archive.cli import parser


def test_dr_arguments() -> None:
    args = parser().parse_args(["dr", "recover", "--topic", "a", "--topic", "b", "--target-bootstrap", "h:9092",
                                "--as-of-ms", "5", "--skip-group", "g", "--allow-config-changes"])
    assert (args.action, args.topic, args.target_bootstrap, args.as_of_ms, args.skip_group,
            args.allow_config_changes) == ("recover", ["a", "b"], "h:9092", 5, ["g"], True)


def test_an_unknown_dr_action_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["dr", "restore"])
    assert "invalid choice: 'restore' (choose from" in capsys.readouterr().err
