"""``attention_options`` of ``attention = "fa4"``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FA4Options(BaseModel):
    """How the fa4 backend runs. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    kernel: Literal["fa4", "reference"] = Field(
        "fa4", description="fa4: flash_attn.cute's kernels (CUDA); reference: a torch emulation "
        "of the same call (any device; tests and debugging, slow)")
    split_kv: Literal["auto", "always", "never"] = Field(
        "auto", description="decode and verify steps: split each request's keys into chunks of "
        "split_size at absolute positions, one kernel call over every query's chunks and tail, "
        "merged by log-sum-exp in one Triton kernel (FA4 has no split-KV on sm_90); auto = when "
        "the step's (request, KV head) pairs fill at most a quarter of the GPU's SMs; always = every decode "
        "step (a request's bits then do not depend on the batch)")
    split_size: int = Field(512, ge=16, le=1 << 20,
                            description="keys per chunk, a multiple of page_size")
    max_splits: int = Field(64, ge=1, le=4096,
                            description="chunks per query at most; keys past max_splits * "
                            "split_size go to the query's last part (its tail)")
    split_tail: Literal["short", "long"] = Field(
        "short", description="where a query's last keys go: short = a tail of 1..split_size "
        "keys after every whole chunk (a one-key tail is one more program, free while SMs are "
        "idle: batch 1); long = the tail keeps the last whole chunk (split_size..2 split_size - 1 "
        "keys: one part fewer, for parts that would spill into a second wave of programs: 256-key "
        "chunks at 4k keys, or batch 4); hinge_fa4.split has the H100's numbers")
    split_call: Literal["batched", "varlen"] = Field(
        "batched", description="how the split step's one kernel call passes its queries (one per "
        "virtual request): batched = (V, 1, H, D) without cu_seqlens_q (no per-call scheduler "
        "kernels); varlen = cu_seqlens_q = arange (the form the unsplit calls use)")
    split_tile_m: Literal[64, 128] = Field(
        64, description="query rows per tile of a batched split call: 64 = one MMA warpgroup, "
        "half the tile a decode query mostly pads (through flash_attn.cute.interface."
        "_flash_attn_fwd's tile_mn, a private function of the pinned flash-attn-4; faster at "
        "every batch and split size tools/gpu/fa4_split_decode.py measured on the H200; falls "
        "back to 128 with a warning where that function is missing); 128 = flash-attn's own "
        "sm_90 choice (two MMA warpgroups)")
    split_tile_n: Literal[64, 128] = Field(
        128, description="keys per tile of a batched split call (flash-attn's sm_90 choice for "
        "head dim 128 is 128); 64 halves a tile's work, for more steps of less latency each "
        "(through the same private function as split_tile_m)")
    split_pack_gqa: bool = Field(
        True, description="split calls: pack a KV head's query heads into one tile's rows "
        "(flash-attn's default for GQA: one program per (part, KV head), each reading its keys "
        "once); False = one program per (part, query head), a KV head's keys read by its "
        "query heads' programs at once (more programs at batch 1; the repeats mostly hit L2)")
    split_intra_wg_overlap: bool = Field(
        True, description="split calls: overlap a tile's softmax with the next block's QK^T MMA "
        "inside a warpgroup (flash-attn's sm_90 choice); False = one after the other (a decode "
        "tile has few rows and few key blocks: tools/gpu/fa4_split_decode.py --forms measures it)")
    split_mma_pv_is_rs: bool = Field(
        True, description="split calls: P V's MMA reads P from registers (flash-attn's sm_90 "
        "choice); False = through shared memory")
    split_query_view: bool = Field(
        True, description="a split step of one query row whose KV the layer stored "
        "(kv_written_by_layer: batch-1 decode with the rope kernel writing the KV) passes the "
        "row to every slot as a stride-0 view instead of copying it: one launch fewer a layer; "
        "False = always copy (A/B)")
    early_launch: bool | None = Field(
        None, description="launch flash-attn's sm_90 forward with programmatic dependent launch "
        "(hinge_fa4.early: its warps wait for the kernel before it in-kernel, so its launch and "
        "prologue overlap that kernel's end, and the split decode's merge launches early "
        "after it); None = hinge.devices.early_dependents ($HINGE_PDL, compute capability 9.x); "
        "False = flash-attn's own plain launch (A/B)")
    jit_cache: bool = Field(True, description="keep compiled kernels on disk "
                            "(FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1)")
    jit_cache_dir: str | None = Field(
        None, description="FLASH_ATTENTION_CUTE_DSL_CACHE_DIR; None = "
        "$XDG_CACHE_HOME/hinge/flash_attention_cute_dsl (~/.cache/...)")
