"""Llama (2, 3.x): the plain pre-norm decoder; Llama 3 rope scaling lives in ``hinge.layers.rotary``."""

from __future__ import annotations

from hinge.models.dense import DenseDecoderLM


class LlamaForCausalLM(DenseDecoderLM):
    qk_norm = False
