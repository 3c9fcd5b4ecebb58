"""Archives declared as Dagster components (docs/components.md), read as one config: each `s3_archive.KafkaArchive`
declaration is one entry of a config file's `archives:`, each `s3_archive.KafkaRestoreTarget` one of its archive's
`restore_targets:`. `settings.py` validates the result with the config file's model and messages, each key path
naming the declaration's `defs.yaml` (`orders/defs.yaml: attributes.flush.count: ...`).

`components.py` gives `declared` the declarations Dagster loaded; `read_declarations` reads a defs folder's files
without Dagster (`load_settings` of a folder: the demo's, or one named by $S3_ARCHIVE_CONFIG), so a command
(`s3-archive erase`, `metrics serve`, …) sees the archives the UI shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from s3_archive.model.errors import InvalidConfig

ARCHIVE_TYPE = "s3_archive.KafkaArchive"
TARGET_TYPE = "s3_archive.KafkaRestoreTarget"


@dataclass(frozen=True)
class Declaration:
    """One component's attributes and where it is declared (its defs.yaml, relative to the defs folder)."""

    where: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Declared:
    """A project's declarations as a config file's data, and how its key paths name the declarations."""

    data: dict[str, Any]  # {"archives": [...]}
    places: list[str]  # each archive's defs.yaml
    renames: dict[str, str]  # a restore target's key path in `data` -> its defs.yaml

    def error(self, error: InvalidConfig) -> InvalidConfig:
        """The config's error with the declarations' key paths (`<defs.yaml>: attributes...`)."""
        text = str(error)
        for old, new in self.renames.items():
            text = text.replace(old, new)
        return renamed(InvalidConfig(text), self.places)


def renamed(error: InvalidConfig, places: Sequence[str]) -> InvalidConfig:
    """The config file's key paths (`archives[i]...`) as the declarations' (`<defs.yaml>: attributes...`)."""
    text = re.sub(r"archives\[(\d+)\]", lambda m: f"{places[int(m.group(1))]}: attributes", str(error))
    return InvalidConfig(text.replace("invalid s3-archive config", "invalid s3-archive component", 1))


def target_archive(target: Declaration) -> str:
    """A KafkaRestoreTarget's `archive`, or the error naming its defs.yaml."""
    archive = target.attributes.get("archive")
    if not isinstance(archive, str) or not archive:
        raise InvalidConfig(f"invalid s3-archive component:\n  {target.where}: attributes.archive: the name of the "
                            f"KafkaArchive this target restores, got {archive!r}")
    return archive


def declared(archives: Sequence[Declaration], targets: Sequence[Declaration]) -> Declared:
    """The config a file listing the archives would hold (in this order, each with the restore targets declared
    apart appended to its own)."""
    if targets and not archives:
        raise InvalidConfig(f"invalid s3-archive component:\n  {targets[0].where}: attributes.archive: no "
                            f"KafkaArchive is declared in this project (archive {target_archive(targets[0])!r})")
    entries = [dict(a.attributes) for a in archives]
    names = [e.get("name") for e in entries]
    renames: dict[str, str] = {}
    for t in targets:
        archive = target_archive(t)
        if archive not in names:
            raise InvalidConfig(f"invalid s3-archive component:\n  {t.where}: attributes.archive: no KafkaArchive "
                                f"is named {archive!r} (archives: {', '.join(sorted(map(str, names)))})")
        i = names.index(archive)
        own = entries[i]["restore_targets"] = list(entries[i].get("restore_targets") or [])
        renames[f"archives[{i}].restore_targets[{len(own)}]"] = f"{t.where}: attributes"
        own.append({k: v for k, v in t.attributes.items() if k != "archive"})
    return Declared({"archives": entries}, [a.where for a in archives], renames)


def read_declarations(folder: Path) -> Declared:
    """Every KafkaArchive and KafkaRestoreTarget declared in a defs folder's `defs.yaml` files (by path; other
    component types are not ours and left alone)."""
    archives: list[Declaration] = []
    targets: list[Declaration] = []
    for path in sorted(folder.rglob("defs.yaml")):
        where = str(path.relative_to(folder))
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError) as e:
            raise InvalidConfig(f"cannot read the component declaration {path}: {e}") from None
        for doc in documents:
            if not isinstance(doc, dict) or doc.get("type") not in (ARCHIVE_TYPE, TARGET_TYPE):
                continue
            attributes = doc.get("attributes") or {}
            if not isinstance(attributes, dict):
                raise InvalidConfig(f"invalid s3-archive component:\n  {where}: attributes: a mapping of the "
                                    f"settings, got {attributes!r:.60}")
            (archives if doc["type"] == ARCHIVE_TYPE else targets).append(Declaration(where, attributes))
    if not archives:
        raise InvalidConfig(f"{folder} declares no {ARCHIVE_TYPE} (a defs.yaml per archive; docs/components.md)")
    return declared(archives, targets)
