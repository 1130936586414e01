"""Options of the built-in ``triton`` attention backend (``attention_options``); no torch here,
so the plugin module can name this model without importing a kernel."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class TritonAttentionOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: keys per KV split, at absolute positions (multiples of it): the unit of the fixed reduction
    #: order. Changes the bits (every step of one engine uses the same value), not the results.
    split_size: int = Field(256, ge=64)
    #: how decode-shaped steps (every request <= 16 new tokens) spread a row's splits:
    #: ``auto`` over parallel programs plus a combine kernel when a row has more than one split,
    #: ``always`` for every step, ``never`` (one program folds the splits). The bits are the same.
    split_kv: Literal["auto", "always", "never"] = "auto"

    @field_validator("split_size")
    @classmethod
    def _multiple_of_64(cls, value: int) -> int:
        if value % 64:
            raise ValueError(f"split_size {value} must be a multiple of 64 (the key block)")
        return value
