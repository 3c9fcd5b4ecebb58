"""Archives declared as components (s3_archive/components.py), loaded from a project's defs folder in process: the
same definitions as the config file's, and the config file's errors with the defs.yaml's key paths."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from s3_archive.cli import main
from s3_archive.config.settings import load_settings, parse_settings
from s3_archive.definitions import DEMO_CONFIG, build_defs
from s3_archive.local.demo_location import load_demo_defs
from s3_archive.model.errors import InvalidConfig
from s3_archive_tests.component_project import new_project


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A fresh project whose package (a name of its own: modules stay imported) is importable."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    root = new_project(tmp_path / "shop", name)
    monkeypatch.syspath_prepend(str(root / "src"))
    return root / "src" / name


def _declare(project: Path, folder: str, attributes: dict) -> None:
    """A KafkaArchive, or a KafkaRestoreTarget when the attributes name an `archive`."""
    where = project / "defs" / folder
    where.mkdir(parents=True)
    kind = "s3_archive.KafkaRestoreTarget" if "archive" in attributes else "s3_archive.KafkaArchive"
    (where / "defs.yaml").write_text(yaml.safe_dump({"type": kind, "attributes": attributes}))


def _load(project: Path) -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=project)


ORDERS = {"name": "orders", "topics": ["orders"], "bucket": "lake", "flush": {"count": 500},
          "restore_targets": [{"name": "replay", "target_topic": "{topic}.restored"}]}
CLICKS = {"name": "clicks", "topics": ["clicks"], "bucket": "lake", "format": "jsonl"}


def _shape(defs: dg.Definitions) -> tuple:
    return (sorted(k.to_user_string() for k in defs.resolve_all_asset_keys()),
            sorted(s.name for s in defs.sensors), sorted(s.name for s in defs.schedules or []),
            sorted(defs.resources or {}))


def test_two_components_are_the_definitions_of_the_same_config_file(project):
    _declare(project, "orders", ORDERS)
    _declare(project, "clicks", CLICKS)
    assert _shape(_load(project)) == _shape(build_defs(parse_settings({"archives": [CLICKS, ORDERS]})))


@pytest.mark.parametrize("attributes,message", [
    ({**ORDERS, "flush": {"count": 0}}, "orders/defs.yaml: attributes.flush.count: "),
    ({**ORDERS, "format": "orc"}, "orders/defs.yaml: attributes.format: "),
    ({k: v for k, v in ORDERS.items() if k != "bucket"}, "orders/defs.yaml: attributes.bucket: Field required"),
])
def test_a_bad_archive_is_the_config_files_error_at_its_defs_yaml(project, attributes, message):
    _declare(project, "orders", attributes)
    with pytest.raises(Exception) as got:
        _load(project)
    errors = [e for e in _chain(got.value) if isinstance(e, InvalidConfig)]
    assert errors and message in str(errors[0]), _chain(got.value)
    # The config file says the same thing at its own key path.
    with pytest.raises(InvalidConfig) as same:
        parse_settings({"archives": [attributes]})
    assert str(same.value).split("archives[0].", 1)[1] in str(errors[0])


def test_two_archives_of_one_topic_name_both_defs_yaml(project):
    _declare(project, "orders", ORDERS)
    _declare(project, "orders_again", {**ORDERS, "name": "orders2"})
    with pytest.raises(Exception) as got:
        dg.Definitions.merge(_load(project)).get_repository_def()
    text = "\n".join(str(e) for e in _chain(got.value) if isinstance(e, InvalidConfig))
    assert "orders_again/defs.yaml: attributes.topics: topic 'orders' is already in orders/defs.yaml" in text


def _chain(e: BaseException) -> list[BaseException]:
    out = []
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def test_a_restore_target_component_is_its_archives_restore_target(project):
    _declare(project, "orders", {k: v for k, v in ORDERS.items() if k != "restore_targets"})
    _declare(project, "orders_dr", {"archive": "orders", "name": "replay", "target_topic": "{topic}.restored"})
    assert _shape(_load(project)) == _shape(build_defs(parse_settings({"archives": [ORDERS]})))


def test_a_bad_restore_target_names_its_defs_yaml(project):
    _declare(project, "orders", {k: v for k, v in ORDERS.items() if k != "restore_targets"})
    _declare(project, "orders_dr", {"archive": "orders", "name": "Bad Name", "target_topic": "x"})
    with pytest.raises(Exception) as got:
        dg.Definitions.merge(_load(project)).get_repository_def()
    text = "\n".join(str(e) for e in _chain(got.value) if isinstance(e, InvalidConfig))
    assert "orders_dr/defs.yaml: attributes.name: " in text
    _declare(project, "ghost_dr", {"archive": "ghost", "name": "replay", "target_topic": "x"})
    with pytest.raises(Exception) as got:
        dg.Definitions.merge(_load(project)).get_repository_def()
    text = "\n".join(str(e) for e in _chain(got.value) if isinstance(e, InvalidConfig))
    assert "ghost_dr/defs.yaml: attributes.archive: no KafkaArchive is named 'ghost' (archives: orders)" in text


def test_a_config_file_converted_by_the_command_loads_as_the_same_definitions(project, tmp_path, capsys):
    config = tmp_path / "archives.yaml"
    config.write_text(yaml.safe_dump({"archives": [ORDERS, CLICKS]}))
    assert main(["components", str(config), "--out", str(project / "defs")]) == 0
    assert "orders/defs.yaml" in capsys.readouterr().out
    assert _shape(_load(project)) == _shape(build_defs(parse_settings({"archives": [ORDERS, CLICKS]})))
    assert main(["components", str(config), "--out", str(project / "defs")]) == 1  # not overwritten
    assert "exists already; not overwritten" in capsys.readouterr().err
    config.write_text(yaml.safe_dump({"archives": [ORDERS], "foreign_sources": []}))
    assert main(["components", str(config), "--out", str(tmp_path / "other")]) == 1
    assert "foreign_sources have no component form yet" in capsys.readouterr().err


def test_a_defs_folder_read_as_a_config_is_what_the_component_loader_builds(project):
    """`load_settings` of a defs folder (what $S3_ARCHIVE_CONFIG may name; the CLI's and the exporter's view of a
    project) holds the archives Dagster's loader builds, and refuses with the same message at the same defs.yaml."""
    _declare(project, "orders", {k: v for k, v in ORDERS.items() if k != "restore_targets"})
    _declare(project, "orders_dr", {"archive": "orders", "name": "replay", "target_topic": "{topic}.restored"})
    _declare(project, "clicks", CLICKS)
    settings = load_settings(project / "defs")
    assert [a.name for a in settings.archives] == ["clicks", "orders"]  # by path, as the loader takes them
    assert [t.name for t in settings.archives[1].restore_targets] == ["replay"]
    assert _shape(build_defs(settings)) == _shape(_load(project))

    _declare(project, "orders_again", {**ORDERS, "name": "orders2"})
    with pytest.raises(InvalidConfig) as got:
        load_settings(project / "defs")
    assert "orders_again/defs.yaml: attributes.topics: topic 'orders' is already in orders/defs.yaml" in str(got.value)
    (project / "empty").mkdir()
    with pytest.raises(InvalidConfig, match="empty declares no s3_archive.KafkaArchive"):
        load_settings(project / "empty")


def test_the_demo_declares_its_archive_and_restore_targets_as_components():
    """The demo's defs folder: one KafkaArchive and its two restore targets, served by Dagster's component loader
    (`demo_location.py`) as the definitions of the same settings the CLI reads from it."""
    settings = load_settings(DEMO_CONFIG)
    [demo] = settings.archives
    assert (demo.name, demo.topics) == ("demo", ["demo.orders", "demo.clicks"])
    assert sorted((t.name, t.dry_run) for t in demo.restore_targets) == [("preview", True), ("replay", False)]
    kinds = {p.relative_to(DEMO_CONFIG).as_posix(): yaml.safe_load(p.read_text())["type"]
             for p in DEMO_CONFIG.rglob("defs.yaml")}
    assert kinds == {"demo/defs.yaml": "s3_archive.KafkaArchive", "preview/defs.yaml": "s3_archive.KafkaRestoreTarget",
                     "replay/defs.yaml": "s3_archive.KafkaRestoreTarget"}
    assert _shape(load_demo_defs()) == _shape(build_defs(settings))
