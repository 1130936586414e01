"""Options of the built-in ``flashinfer`` attention backend (``attention_options``).

Pydantic only: the plugin module imports this to register the spec, so nothing here may import
torch or flashinfer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FlashInferOptions(BaseModel):
    """``attention_options`` of ``attention: flashinfer``; every field has a default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["fa2", "fa3", "auto"] = Field(
        "fa2",
        description="flashinfer kernel family of the prefill wrappers (and tensor-core decode): "
        "fa2 (sglang's choice on Hopper), fa3, or auto (flashinfer picks; fa3 on sm90)",
    )
    decode_tensor_cores: Literal["auto", "on", "off"] = Field(
        "auto",
        description="decode through the tensor-core (prefill) kernel: auto = when a KV head serves "
        "at least 4 query heads (GQA group >= 4), as sglang does",
    )
    decode_split_kv: Literal["planner", "auto", "never"] = Field(
        "auto",
        description="decode steps' KV split (partial results merged by a second kernel): auto "
        "(default) = no split once the step's (request, KV head) pairs fill the GPU's SMs, else "
        "as the planner decides (on the H200 the planner ran a 3.6 us merge a layer at batch 64 "
        "with short contexts; auto took Qwen3-8B batch-64 decode from 64.5% to 66.1% of the "
        "roofline); planner = flashinfer's planner always decides, as sglang leaves it; never = "
        "no split in any decode step",
    )
    workspace_mb: int = Field(
        512, ge=16, le=8192,
        description="flashinfer float workspace in MiB (split-KV partial results), shared by "
        "every wrapper; allocated once when the backend is built",
    )
    jit_cache_base: str | None = Field(
        None,
        description="FLASHINFER_WORKSPACE_BASE: compiled kernels are cached on disk under "
        "<base>/.cache/flashinfer, so a second start compiles nothing. None = the environment's "
        "FLASHINFER_WORKSPACE_BASE, else the home directory. Takes effect only if flashinfer was "
        "not imported yet in this process",
    )
