"""OpenLineage events checked against the spec's JSON schema, with no network.

The schema files are in `lineage_spec/`: OpenLineage.json (2-0-2) and the facets s3-archive emits, copied from the
OpenLineage repository's `spec/` (Apache-2.0), because no package ships them (openlineage-python carries classes
generated from them, not the files). Our own facets' schema is the one the package ships
(`s3_archive/io/lineage_facets.json`).
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from s3_archive.io.lineage import FACETS_SCHEMA

SPEC = Path(__file__).parent / "lineage_spec"
RUN_EVENT = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def _registry() -> Registry:
    resources = []
    for path in [*sorted(SPEC.glob("*.json")), FACETS_SCHEMA]:
        doc = json.loads(path.read_text())
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def _validate(instance: object, url: str) -> None:
    Draft202012Validator({"$ref": url}, registry=REGISTRY,
                         format_checker=Draft202012Validator.FORMAT_CHECKER).validate(instance)


def _facets(event: dict) -> list[dict]:
    """Every facet of the event: the run's, the job's, each dataset's (and its input or output facets)."""
    out = [*event["run"].get("facets", {}).values(), *event["job"].get("facets", {}).values()]
    for d in [*event.get("inputs", []), *event.get("outputs", [])]:
        out += [*d.get("facets", {}).values(), *d.get("inputFacets", {}).values(),
                *d.get("outputFacets", {}).values()]
    return out


def validate_event(event: dict) -> None:
    """The event against RunEvent, and each facet against the schema its `_schemaURL` names (all known here: a facet
    whose schema is not in the registry fails)."""
    _validate(event, RUN_EVENT)
    for facet in _facets(event):
        _validate(facet, facet["_schemaURL"])


def read_events(path: Path) -> list[dict]:
    """The events the file transport appended to `path` (one JSON document a line)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def capture_lineage(monkeypatch, path: Path) -> Path:
    """Lineage on, through OpenLineage's file transport, appending every event to `path` (runs started in this
    process, as `dg.materialize` runs them)."""
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(path))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    return path


def stop_capturing(monkeypatch) -> None:
    """Lineage off again (what `capture_lineage` set, removed)."""
    for var in ("OPENLINEAGE__TRANSPORT__TYPE", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH",
                "OPENLINEAGE__TRANSPORT__APPEND"):
        monkeypatch.delenv(var, raising=False)
