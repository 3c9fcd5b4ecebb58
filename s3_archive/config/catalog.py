"""Where and how an archive's topics are catalogued in Glue (`catalog:` of an archive)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

DEFAULT_DATABASE = "s3_archive"
_GLUE_NAME = re.compile(r"[a-z0-9_]{1,255}")


class CatalogOptions(BaseModel):
    """Where and how an archive's topics are catalogued."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    database: str = DEFAULT_DATABASE
    table_prefix: str = ""
    partitions: Literal["projection", "explicit"] = "projection"

    @field_validator("database")
    @classmethod
    def _database(cls, v: str) -> str:
        if not _GLUE_NAME.fullmatch(v):
            raise ValueError(f"must be 1-255 of a-z 0-9 _ (Glue and Athena database names), got {v!r}")
        return v

    @field_validator("table_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v and not _GLUE_NAME.fullmatch(v):
            raise ValueError(f"must be a-z 0-9 _ only, got {v!r}")
        return v
