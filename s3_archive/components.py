"""Archives and their restore targets declared as Dagster components (docs/components.md).

`dg scaffold defs s3_archive.KafkaArchive orders` writes `defs/orders/defs.yaml`, whose `attributes` are one
archive of the config file (`archives:`' entries, docs/configuration.md), validated by the same model with the same
messages, key paths included (`orders/defs.yaml: attributes.flush.count: ...`). `s3_archive.KafkaRestoreTarget`
declares one of an archive's `restore_targets` (its `archive`: the archive's name).

The archives of a project are one set, as in the config file: names and topics unique across them, one lifecycle
rule per bucket, one shared `s3_archive_sync` sensor and resources. So the first `KafkaArchive` of the component
tree (by path) builds the definitions of all of them and of their targets (`definitions.build_defs`); the others
contribute none of their own. Definitions load as they do from the config file: no network, the connection
settings from the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.declarations import Declaration, declared, renamed, target_archive
from s3_archive.config.settings import declared_settings, parse_settings
from s3_archive.model.errors import InvalidConfig

DEFAULT_BUCKET = "s3-archive-local"  # the local stack's bucket (`s3-archive local up`)


class ArchiveAttributes(BaseModel):
    """`attributes:` of a KafkaArchive's defs.yaml: one archive, validated by `ArchiveConfig` in `load` (so the
    errors are the config file's)."""

    model_config = ConfigDict(extra="allow", title="KafkaArchive attributes: one archive's settings "
                                                   "(docs/configuration.md)")


class ScaffoldParams(BaseModel):
    bucket: str = DEFAULT_BUCKET
    topics: list[str] | None = None  # None: one topic named as the folder
    prefix: str = "archive/"


class ArchiveScaffolder(dg.Scaffolder[ScaffoldParams]):
    """`dg scaffold defs s3_archive.KafkaArchive <name> [--json-params '{"bucket": ..., "topics": [...]}']`."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[ScaffoldParams]) -> None:
        name = request.target_path.name
        params = request.params or ScaffoldParams()
        attributes = {"name": name, "topics": params.topics or [name], "bucket": params.bucket,
                      "prefix": params.prefix, "format": "parquet", "flush": {"count": 1000}}
        dg.scaffold_component(request, attributes)


def _where(path: Path, context: dg.ComponentLoadContext) -> str:
    """The declaration's defs.yaml, relative to the defs folder (what an error names)."""
    try:
        return str((path / "defs.yaml").relative_to(context.defs_module_path))
    except ValueError:
        return str(path / "defs.yaml")


@dg.scaffold_with(ArchiveScaffolder)
class KafkaArchive(dg.Component):
    """An archive of Kafka topics to S3, exactly once, as Dagster assets (one entry of the config file's
    `archives:`; docs/configuration.md)."""

    def __init__(self, config: ArchiveConfig, where: str) -> None:
        self.config = config
        self.where = where

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return ArchiveAttributes

    @classmethod
    def load(cls, attributes: BaseModel | None, context: dg.ComponentLoadContext) -> KafkaArchive:
        data: dict[str, Any] = attributes.model_dump() if attributes is not None else {}
        where = _where(context.path, context)
        try:
            settings = parse_settings({"archives": [data]})
        except InvalidConfig as e:
            raise renamed(e, [where]) from None
        return cls(settings.archives[0], where)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        tree = context.component_tree
        archives = sorted(tree.get_all_components(of_type=KafkaArchive), key=lambda c: c.where)
        if archives[0] is not self:
            return dg.Definitions()
        return project_defs(archives, sorted(tree.get_all_components(of_type=KafkaRestoreTarget),
                                             key=lambda c: c.where))


class TargetAttributes(BaseModel):
    model_config = ConfigDict(extra="allow", title="KafkaRestoreTarget attributes: `archive` (the archive's name) "
                                                   "and one restore target's settings (docs/restore.md)")


class TargetScaffoldParams(BaseModel):
    archive: str = "orders"
    target_topic: str = "{topic}.restored"


class TargetScaffolder(dg.Scaffolder[TargetScaffoldParams]):
    """`dg scaffold defs s3_archive.KafkaRestoreTarget <name> --json-params '{"archive": ..., "target_topic": ...}'`."""

    @classmethod
    def get_scaffold_params(cls) -> type[TargetScaffoldParams]:
        return TargetScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[TargetScaffoldParams]) -> None:
        params = request.params or TargetScaffoldParams()
        dg.scaffold_component(request, {"archive": params.archive, "name": request.target_path.name,
                                        "target_topic": params.target_topic})


@dg.scaffold_with(TargetScaffolder)
class KafkaRestoreTarget(dg.Component):
    """A restore target of an archive declared as a KafkaArchive (`archive`: its name): one entry of the archive's
    `restore_targets:` (docs/restore.md), built with the archive."""

    def __init__(self, archive: str, target: dict[str, Any], where: str) -> None:
        self.archive = archive
        self.target = target
        self.where = where

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return TargetAttributes

    @classmethod
    def load(cls, attributes: BaseModel | None, context: dg.ComponentLoadContext) -> KafkaRestoreTarget:
        data: dict[str, Any] = attributes.model_dump() if attributes is not None else {}
        where = _where(context.path, context)
        archive = target_archive(Declaration(where, data))
        return cls(archive, {k: v for k, v in data.items() if k != "archive"}, where)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        if not context.component_tree.get_all_components(of_type=KafkaArchive):
            raise InvalidConfig(f"invalid s3-archive component:\n  {self.where}: attributes.archive: no "
                                f"KafkaArchive is declared in this project (archive {self.archive!r})")
        return dg.Definitions()  # built with its archive, by the project's first KafkaArchive


def project_defs(archives: list[KafkaArchive], targets: list[KafkaRestoreTarget]) -> dg.Definitions:
    """The definitions of a project's archives and restore targets, as `definitions.load_defs` builds those of a
    config file (the errors name each declaration's defs.yaml; config/declarations.py)."""
    from s3_archive.definitions import build_defs, known_topics

    config = declared([Declaration(a.where, a.config.model_dump(by_alias=True, exclude_unset=True)) for a in archives],
                      [Declaration(t.where, {"archive": t.archive, **t.target}) for t in targets])
    settings = declared_settings(config)
    return build_defs(settings, known_topics(settings))


def write_components(config: Path, out: Path) -> list[Path]:
    """`s3-archive components CONFIG --out DEFS`: each archive of a config file as a KafkaArchive declaration,
    `DEFS/<archive name>/defs.yaml` (its restore targets kept in its attributes). Refuses what has no component
    form (`foreign_sources`, `topic_discovery`) and a declaration that exists already."""
    import yaml

    from s3_archive.config.settings import load_settings

    settings = load_settings(config)
    data = yaml.safe_load(config.read_text())
    extra = sorted(k for k in data if k != "archives")
    if extra:
        raise InvalidConfig(f"{config}: {', '.join(extra)} have no component form yet; keep the config file "
                            "($S3_ARCHIVE_CONFIG) for this project (docs/components.md)")
    written = []
    for archive, attributes in zip(settings.archives, data["archives"], strict=True):
        target = out / archive.name / "defs.yaml"
        if target.exists():
            raise InvalidConfig(f"{target} exists already; not overwritten")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump({"type": "s3_archive.KafkaArchive", "attributes": attributes},
                                         sort_keys=False))
        written.append(target)
    return written
