"""Qwen3 dense: Llama's decoder plus per-head RMSNorm on q and k before rotary."""

from __future__ import annotations

from hinge.models.dense import DenseDecoderLM


class Qwen3ForCausalLM(DenseDecoderLM):
    qk_norm = True
