"""The custom OpenLineage facets of s3-archive (their JSON schema: `lineage_facets.json` beside this module).

Imported only when lineage is on (`io/lineage.py`): it imports openlineage-python.
"""

from __future__ import annotations

import attr
from openlineage.client.facet_v2 import InputDatasetFacet, OutputDatasetFacet

FACETS_ID = "urn:s3-archive:lineage-facets:1"  # the schema's $id; a facet's _schemaURL is $id#/$defs/<its name>


@attr.define
class Window:
    """One offset window: `[startOffset, endOffset)` of `partition`, its key (the Dagster partition key) and,
    when known, its records."""

    key: str
    partition: int
    startOffset: int  # noqa: N815 - the spec's camelCase
    endOffset: int  # noqa: N815
    records: int | None = attr.field(default=None)


@attr.define
class WindowsInputDatasetFacet(InputDatasetFacet):
    """The windows a run read from this dataset (an archive: the Kafka topic's offset ranges)."""

    windows: list[Window] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_ID}#/$defs/WindowsInputDatasetFacet"


@attr.define
class WindowsOutputDatasetFacet(OutputDatasetFacet):
    """The windows a run wrote to this dataset (an archive: the windows committed under the S3 location)."""

    windows: list[Window] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_ID}#/$defs/WindowsOutputDatasetFacet"


@attr.define
class ErasedWindowFacet:
    """One window an erasure rewrote: its key, the manifest generation it committed, the records it erased."""

    key: str
    generation: int
    records: int


@attr.define
class ErasureOutputDatasetFacet(OutputDatasetFacet):
    """What an erasure did to this dataset (an archive's S3 location): the records erased and the windows rewritten.
    Never what was matched (a key, a field's value)."""

    records: int = attr.field(default=0)
    windows: list[ErasedWindowFacet] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACETS_ID}#/$defs/ErasureOutputDatasetFacet"
