"""Archives declared as Dagster components (docs/components.md): `dg scaffold defs s3_archive.KafkaArchive orders`
writes `defs/orders/defs.yaml`, whose `attributes` are one archive of the config file (`archives:`' entries,
docs/configuration.md), validated by the same model with the same messages, key paths included
(`orders/defs.yaml: attributes.flush.count: must be >= 1, got 0`).

The archives of a project are one set, as in the config file: names and topics unique across them, one lifecycle
rule per bucket, one shared `s3_archive_sync` sensor and resources. So the first `KafkaArchive` of the component
tree (by path) builds the definitions of all of them (`definitions.build_defs`); the others contribute none of their
own. Definitions load as they do from the config file: no network, the connection settings from the environment.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import parse_settings
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


def _rename(error: InvalidConfig, places: list[str]) -> InvalidConfig:
    """The config file's key paths (`archives[i]...`) as the components' (`<defs.yaml>: attributes...`)."""
    text = re.sub(r"archives\[(\d+)\]", lambda m: f"{places[int(m.group(1))]}: attributes", str(error))
    return InvalidConfig(text.replace("invalid s3-archive config", "invalid s3-archive component", 1))


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
            raise _rename(e, [where]) from None
        return cls(settings.archives[0], where)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        archives = sorted(context.component_tree.get_all_components(of_type=KafkaArchive), key=lambda c: c.where)
        if archives[0] is not self:
            return dg.Definitions()
        return project_defs(archives)


def project_defs(archives: list[KafkaArchive]) -> dg.Definitions:
    """The definitions of a project's archives, as `definitions.load_defs` builds those of a config file (the
    cross-archive checks name each archive's defs.yaml)."""
    from s3_archive.definitions import build_defs, known_topics

    try:
        settings = parse_settings({"archives": [a.config.model_dump(by_alias=True, exclude_unset=True)
                                                for a in archives]})
    except InvalidConfig as e:
        raise _rename(e, [a.where for a in archives]) from None
    return build_defs(settings, known_topics(settings))
