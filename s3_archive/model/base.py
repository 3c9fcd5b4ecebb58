"""TODO: model.base"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    # strict: YAML gives real ints and bools; "10" or `true` for a count is a mistake worth naming
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
