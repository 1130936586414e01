"""The pre-norm decoder shared by Llama, Qwen3 and Qwen3-MoE (module names as in HF checkpoints).

    embed_tokens -> [input_layernorm -> self_attn -> +residual
                     -> post_attention_layernorm -> mlp -> +residual] x L -> norm -> lm_head

Families differ only in class attributes (``qk_norm``) and ``make_mlp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.contracts import AttentionLayer
from hinge.engine.batch import ForwardOutput
from hinge.layers import GatedMLP, Linear, LMHead, RMSNorm, RotaryEmbedding, VocabEmbedding
from hinge.layers.rotary import CHUNK
from hinge.models.base import CausalLM, ModelConfig

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.engine.batch import ForwardContext


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
    ) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = head_dim_of(cfg)
        bias = bool(getattr(cfg, "attention_bias", False))
        hidden, q_out, kv_out = cfg.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = Linear(hidden, q_out, bias, quantizer, dtype, f"{prefix}.q_proj")
        self.k_proj = Linear(hidden, kv_out, bias, quantizer, dtype, f"{prefix}.k_proj")
        self.v_proj = Linear(hidden, kv_out, bias, quantizer, dtype, f"{prefix}.v_proj")
        self.o_proj = Linear(q_out, hidden, bias, quantizer, dtype, f"{prefix}.o_proj")
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
        )

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: ForwardContext):
        t = h.shape[0]
        q = self.q_proj(h).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(h).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(h).view(t, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        rotary = self.rotary[0]
        q, k = rotary.apply(q, cos, sin), rotary.apply(k, cos, sin)
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

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, ctx)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderStack(nn.Module):
    """The ``model.*`` part of the checkpoint: embeddings, layers, final norm."""

    def __init__(self, embed_tokens: VocabEmbedding, layers: list[DecoderLayer], norm: RMSNorm) -> None:
        super().__init__()
        self.embed_tokens = embed_tokens
        self.layers = nn.ModuleList(layers)
        self.norm = norm


class DenseDecoderLM(CausalLM):
    qk_norm: bool = False

    def __init__(
        self, config: ModelConfig, *, quantizer: Quantizer, dtype: torch.dtype, deterministic: bool = False
    ) -> None:
        super().__init__(config)
        cfg = config.hf_config
        self.deterministic = deterministic
        self.rotary = RotaryEmbedding.from_config(cfg, head_dim_of(cfg))
        embed = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, dtype)
        layers = []
        for i in range(cfg.num_hidden_layers):
            prefix = f"model.layers.{i}"
            attn = DecoderAttention(
                cfg, i, self.rotary, quantizer, dtype,
                qk_norm=self.qk_norm, deterministic=deterministic, prefix=f"{prefix}.self_attn",
            )
            mlp = self.make_mlp(cfg, i, quantizer, dtype, deterministic, f"{prefix}.mlp")
            layers.append(DecoderLayer(cfg, attn, mlp, dtype, deterministic))
        norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic)
        self.model = DecoderStack(embed, layers, norm)
        self.lm_head = LMHead(
            cfg.vocab_size, cfg.hidden_size, dtype,
            tied_to=embed if config.tie_word_embeddings else None, deterministic=deterministic,
        )
        self.attention_layers = [layer.self_attn.layer for layer in self.model.layers]
        self.ensure_positions(min(config.max_position_embeddings or CHUNK, 8 * CHUNK))

    def ensure_positions(self, num_positions: int) -> None:
        """Build the rotary table up to ``num_positions`` now (call before capturing CUDA graphs:
        a table grown later is a new tensor a captured graph would not see)."""
        self.rotary.ensure_positions(num_positions)

    def make_mlp(self, cfg: Any, layer_idx: int, quantizer, dtype, deterministic, prefix: str) -> nn.Module:
        bias = bool(getattr(cfg, "mlp_bias", False))
        return GatedMLP(
            cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, quantizer, dtype, prefix, bias,
            deterministic=deterministic,
        )

    def forward(self, ctx: ForwardContext) -> ForwardOutput:
        batch = ctx.batch
        capture = set(batch.capture_hidden_layers)
        num_layers = len(self.model.layers)
        if capture and not capture <= set(range(num_layers + 1)):
            raise ValueError(
                f"capture_hidden_layers {sorted(capture)} out of range: this model has hidden states "
                f"0..{num_layers} (0 = embeddings, {num_layers} = final-normed output)"
            )
        hidden: dict[int, torch.Tensor] = {}
        h = self.model.embed_tokens(batch.input_ids)
        if 0 in capture:
            hidden[0] = h
        max_pos = max(batch.seq_lens_cpu, default=1) - 1 if batch.extend_lens_cpu else None
        cos, sin = self.rotary(batch.positions, max_pos)
        for i, layer in enumerate(self.model.layers):
            h = layer(h, cos, sin, ctx)
            if i + 1 in capture and i + 1 < num_layers:
                hidden[i + 1] = h
        h = self.model.norm(h)
        if num_layers in capture:
            hidden[num_layers] = h  # NOTE: HF ties the last hidden state to the final-normed one
        logits = self.lm_head(h.index_select(0, batch.logits_indices))
        ctx.hidden_states.update(hidden)
        return ForwardOutput(logits=logits, hidden_states=hidden)
