"""A Schema Registry decode plan as driver/registry_plan.py makes it, for the decoding tests."""

from __future__ import annotations

import json

from s3_archive.archive.protocol import DecodedPart, DecodePlan
from s3_archive.io.registry_client import RegistrySchema
from s3_archive.model.registry_types import avro_columns, merge_types


def union_plan(*schemas: RegistrySchema) -> DecodePlan:
    """A plan of topic `t`'s value decoded by `schemas`: its columns the union of the versions' fields."""
    struct = avro_columns(schemas[0].text)
    for s in schemas[1:]:
        struct = merge_types(struct, avro_columns(s.text))
    part = DecodedPart("value", "avro", "t-value", schemas, json.dumps(struct),
                       tuple(f["name"] for f in struct["fields"]))
    return DecodePlan("t", (part,))
