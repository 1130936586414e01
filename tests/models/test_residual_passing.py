"""Residual passing between layers (``hinge.models.stack.pre_norm_layer``) computes what the adds
written out compute, bit for bit, for every layer family: an engine whose layers run the unfused
forward (each add on its own, the hidden state formed after every layer) gives the same greedy
tokens and the same logprob bits, in float32 and bfloat16 on the CPU."""

from __future__ import annotations

import pytest
import torch

from hinge.config import EngineConfig
from hinge.engine.engine import Engine
from hinge.models.dense import DecoderLayer
from hinge.models.lfm2 import Lfm2DecoderLayer
from hinge.models.qwen3_5 import Qwen3_5DecoderLayer
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer
from hinge.testing.engine_runs import run_requests

#: each layer class's (norm, mixer, norm, feed-forward) attribute names
PARTS = {DecoderLayer: ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"),
         Qwen3_5DecoderLayer: ("input_layernorm", "mix", "post_attention_layernorm", "mlp"),
         Lfm2DecoderLayer: ("operator_norm", "mix", "ffn_norm", "feed_forward")}
ARCHS = {"qwen3": DecoderLayer, "qwen3_moe": DecoderLayer, "qwen3_5": Qwen3_5DecoderLayer,
         "lfm2": Lfm2DecoderLayer}


def unfused(names):
    def forward(self, h, cos, sin, ctx, residual=None):
        norm1, mix, norm2, ffn = (getattr(self, n) for n in names)
        h = h if residual is None else h + residual
        h = h + mix(norm1(h), cos, sin, ctx)
        out = h + ffn(norm2(h))
        return out, torch.zeros_like(out)  # the stack's out + residual is out (x + 0 == x)
    return forward


def outputs(path, dtype):
    engine = Engine(EngineConfig(model=str(path), device="cpu", dtype=dtype, cache="none",
                                 kv_cache_bytes=32 << 20), progress=False)
    params = SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True, logprobs=True)
    outs = run_requests(engine, [[5, 9, 11, 40, 2, 7, 7, 13], [3, 1, 4, 1, 5]], params)
    return [(o.token_ids, o.logprobs) for o in outs]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_residual_passing_gives_the_bits_of_the_adds_written_out(arch, dtype, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    path = make_tiny_checkpoint(arch, tmp_path / arch, seed=4)
    write_byte_tokenizer(path)
    fused = outputs(path, dtype)
    layer = ARCHS[arch]
    monkeypatch.setattr(layer, "forward", unfused(PARTS[layer]))
    assert outputs(path, dtype) == fused
