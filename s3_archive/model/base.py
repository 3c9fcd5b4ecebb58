"""StrictModel: the one pydantic base of every config model (config/, keys/layout.py) and of the manifest
(model/manifest.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    # strict: YAML gives real ints and bools; "10" or `true` for a count is a mistake worth naming
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
