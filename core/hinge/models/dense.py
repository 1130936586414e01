"""The pre-norm decoder shared by Llama, Qwen3 and Qwen3-MoE (module names as in HF checkpoints,
except the fused linears: ``self_attn.qkv_proj`` loads q_proj | k_proj | v_proj and
``mlp.gate_up_proj`` gate_proj | up_proj).

    embed_tokens -> [input_layernorm -> self_attn -> +residual
                     -> post_attention_layernorm -> mlp -> +residual] x L -> norm -> lm_head

Families differ only in class attributes (``qk_norm``) and ``make_mlp``. Under tensor
parallelism (``tp``) attention heads and MLP rows are split over ranks; embeddings, norms and
the LM head are replicated.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.contracts import AttentionLayer
from hinge.layers import (
    SINGLE,
    GatedMLP,
    Linear,
    RMSNorm,
    RotaryEmbedding,
    TensorParallel,
    VocabEmbedding,
    fast_triton,
)
from hinge.layers.rotary import CHUNK
from hinge.models.base import ModelConfig
from hinge.models.stack import DecoderStackLM, pre_norm_layer

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.forward import ForwardContext


def head_dim_of(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def sliding_window_of(cfg: Any, layer_idx: int) -> int | None:
    """The layer's window: HF ``layer_types`` decides, else a global ``sliding_window`` if enabled."""
    layer_types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    if layer_types is not None:
        return window if layer_types[layer_idx] == "sliding_attention" else None
    if getattr(cfg, "use_sliding_window", True) is False:
        return None
    return window


def logit_softcap_of(cfg: Any) -> float | None:
    """The attention-logit softcap the HF config sets (``attn_logit_softcapping``, as Gemma 2
    defines it), or None. The plan reads the same rule (``hinge.plugins.checks.
    model_logit_softcap``) to refuse a backend that does not declare ``logit_softcap``."""
    from hinge.plugins.checks import model_logit_softcap

    return model_logit_softcap(cfg)


def qkv_linear(hidden: int, sizes: tuple[int, int, int], bias: bool, quantizer: Quantizer,
               dtype: torch.dtype, prefix: str, tp: TensorParallel) -> Linear:
    """``{prefix}.qkv_proj``: the checkpoint's q_proj | k_proj | v_proj as one column-parallel GEMM."""
    return Linear(hidden, sizes, bias, quantizer, dtype, f"{prefix}.qkv_proj",
                  shard_names=tuple(f"{prefix}.{n}_proj" for n in "qkv"), parallel="column", tp=tp)


#: A backend that lets the layer write the step's KV (``kv_written_by_layer``) gets it from the
#: q/k-norm + rope kernel (one launch fewer a layer) unless this is ``0``. On by default since an
#: H100 measured it (2026-12-06, docs/benchmarks.md): batch-1 Qwen3-8B decode 152.2 -> 155.1
#: tokens/s bf16, 327.4 -> 342.6 NVFP4 (``kernel: mma``)
ROPE_KV_ENV = "HINGE_ROPE_KV_WRITE"


def norm_rope(q_norm: RMSNorm, k_norm: RMSNorm, rotary: RotaryEmbedding, q: torch.Tensor,
              k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              kv_target: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Per-head q/k RMSNorm then the rotation: one kernel on CUDA (``fast_triton.qk_norm_rope``,
    ``(1 + w)`` norms too; one program per (token, head), so deterministic mode too), the norms
    and ``apply_qk`` elsewhere. ``kv_target`` ``(v, k_cache, v_cache, loc)``: the kernel also
    stores the step's KV where it can; the returned bool says whether it did."""
    if q_norm.offset == k_norm.offset and fast_triton.enabled(q, q_norm.deterministic,
                                                              invariant=True):
        fused = fast_triton.kernels().qk_norm_rope
        if fused.supports(q, k, cos):
            if kv_target is not None and not fused.writes_kv(q, k, *kv_target):
                kv_target = None
            q, k = fused.qk_norm_rope(q, k, q_norm.weight, k_norm.weight, q_norm.eps, cos, sin,
                                      q_norm.offset, kv_target=kv_target)
            return q, k, kv_target is not None
    q, k = rotary.apply_qk(q_norm(q), k_norm(k), cos, sin)
    return q, k, False


def norm_rope_attend(q_norm: RMSNorm, k_norm: RMSNorm, rotary: RotaryEmbedding, q: torch.Tensor,
                     k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     layer: AttentionLayer, ctx: ForwardContext) -> torch.Tensor:
    """``norm_rope`` then ``ctx.attn.forward``. With a backend claiming ``kv_written_by_layer``
    (and ``$HINGE_ROPE_KV_WRITE`` not ``0``), the fused kernel (where ``norm_rope`` takes it) also
    stores the step's keys and values at ``out_loc`` and the backend is called with
    ``kv_saved=True``: the same KV bits, the KV write's launch saved."""
    caps = getattr(ctx.attn, "capabilities", None)
    target = None
    if os.environ.get(ROPE_KV_ENV, "1") != "0" and getattr(caps, "kv_written_by_layer", False):
        target = (v, ctx.kv.k[layer.kv_layer_id], ctx.kv.v[layer.kv_layer_id], ctx.batch.out_loc)
    q, k, saved = norm_rope(q_norm, k_norm, rotary, q, k, cos, sin, kv_target=target)
    if saved:
        return ctx.attn.forward(q, k, v, layer, ctx.kv, ctx.batch, kv_saved=True)
    return ctx.attn.forward(q, k, v, layer, ctx.kv, ctx.batch)


class DecoderAttention(nn.Module):
    def __init__(
        self,
        cfg: Any,
        layer_idx: int,
        rotary: RotaryEmbedding,
        quantizer: Quantizer,
        dtype: torch.dtype,
        *,
        qk_norm: bool,
        deterministic: bool,
        prefix: str,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        heads = cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        self.num_heads = tp.split(heads, "num_attention_heads")
        self.num_kv_heads = tp.split(kv_heads, "num_key_value_heads")
        self.head_dim = head_dim_of(cfg)
        bias = bool(getattr(cfg, "attention_bias", False))
        hidden, q_out, kv_out = cfg.hidden_size, heads * self.head_dim, kv_heads * self.head_dim
        self.qkv_proj = qkv_linear(hidden, (q_out, kv_out, kv_out), bias, quantizer, dtype, prefix, tp)
        self.o_proj = Linear(q_out, hidden, bias, quantizer, dtype, f"{prefix}.o_proj", parallel="row", tp=tp)
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qk_norm = qk_norm
        if qk_norm:
            norm_args = dict(eps=cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic)
            self.q_norm = RMSNorm(self.head_dim, **norm_args)
            self.k_norm = RMSNorm(self.head_dim, **norm_args)
        self.rotary = [rotary]  # a list: shared module, not registered once per layer
        self.layer = AttentionLayer(
            kv_layer_id=layer_idx,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            scale=self.head_dim**-0.5,
            sliding_window=sliding_window_of(cfg, layer_idx),
            logit_softcap=logit_softcap_of(cfg),
        )

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: ForwardContext):
        t = h.shape[0]
        q, k, v = self.qkv_proj(h).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            o = norm_rope_attend(self.q_norm, self.k_norm, self.rotary[0], q, k, v, cos, sin, self.layer, ctx)
            return self.o_proj(o.reshape(t, self.num_heads * self.head_dim))
        q, k = self.rotary[0].apply_qk(q, k, cos, sin)
        return self._attend(q, k, v, t, ctx)

    def _attend(self, q, k, v, t: int, ctx: ForwardContext) -> torch.Tensor:
        o = ctx.attn.forward(q, k, v, self.layer, ctx.kv, ctx.batch)
        return self.o_proj(o.reshape(t, self.num_heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Any, self_attn: DecoderAttention, mlp: nn.Module, dtype, deterministic) -> None:
        super().__init__()
        norm_args = dict(eps=cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **norm_args)
        self.self_attn = self_attn
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **norm_args)
        self.mlp = mlp

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext,
                residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mlp output, residual)``: both residual adds ride in the norms (``hinge.models.stack``)."""
        return pre_norm_layer(self.input_layernorm, self.self_attn, self.post_attention_layernorm,
                              self.mlp, h, residual, cos, sin, ctx)


class DenseDecoderLM(DecoderStackLM):
    qk_norm: bool = False

    def __init__(
        self, config: ModelConfig, *, quantizer: Quantizer, dtype: torch.dtype, deterministic: bool = False,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__(config)
        cfg = config.hf_config
        self.deterministic = deterministic
        self.tp = tp
        self.rotary = RotaryEmbedding.from_config(cfg, head_dim_of(cfg))
        embed = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, dtype)
        layers = []
        for i in range(cfg.num_hidden_layers):
            prefix = f"model.layers.{i}"
            attn = DecoderAttention(
                cfg, i, self.rotary, quantizer, dtype,
                qk_norm=self.qk_norm, deterministic=deterministic, prefix=f"{prefix}.self_attn", tp=tp,
            )
            mlp = self.make_mlp(cfg, i, quantizer, dtype, deterministic, f"{prefix}.mlp")
            layers.append(DecoderLayer(cfg, attn, mlp, dtype, deterministic))
        norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic)
        self.build_stack(embed, layers, norm, dtype=dtype, deterministic=deterministic)
        self.attention_layers = [layer.self_attn.layer for layer in self.model.layers]
        self.ensure_positions(min(config.max_position_embeddings or CHUNK, 8 * CHUNK))

    def make_mlp(self, cfg: Any, layer_idx: int, quantizer, dtype, deterministic, prefix: str) -> nn.Module:
        bias = bool(getattr(cfg, "mlp_bias", False))
        return GatedMLP(
            cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, quantizer, dtype, prefix, bias,
            deterministic=deterministic, tp=self.tp,
        )
