"""Qwen3.5 text (``qwen3_5_text``): gated DeltaNet layers and gated full attention, by ``layer_types``.

    embed_tokens -> [input_layernorm -> linear_attn | self_attn -> +residual
                     -> post_attention_layernorm -> mlp -> +residual] x L -> norm -> lm_head

RMSNorms are the ``(1 + w)`` form (except the DeltaNet's gated norm); full attention has per-head
q/k norms, partial rotary and a sigmoid output gate (``q_proj`` emits ``[q | gate]`` per head).
Text-only positions make Qwen3.5's interleaved mRoPE plain rotary. ``HybridDecoderLM`` is the
forward every hybrid family shares. ``Qwen3_5ForConditionalGeneration`` loads the text model of
the composite vision-language layout (``text_config``; weights under ``model.language_model.*``)
and ignores the vision tower and the MTP head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.contracts import AttentionLayer
from hinge.engine.batch import ForwardOutput
from hinge.engine.state_pool import PositionStates
from hinge.layers import GatedMLP, Linear, LMHead, RMSNorm, RotaryEmbedding, VocabEmbedding
from hinge.layers.gated_deltanet import GatedDeltaNet
from hinge.layers.recurrent_kernels import get_recurrent_kernels
from hinge.models.base import CausalLM, ModelConfig

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.engine.batch import ForwardContext
    from hinge.layers.recurrent_kernels import RecurrentKernels


def head_dim_of(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


class HybridAttention(nn.Module):
    """Full attention over the KV pool with per-head q/k RMSNorm, (partial) rotary, optional gate."""

    def __init__(self, cfg: Any, kv_layer_id: int, rotary: RotaryEmbedding, quantizer: Quantizer,
                 dtype: torch.dtype, *, gated: bool, norm_offset: float, eps: float,
                 deterministic: bool, prefix: str) -> None:
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_attention_heads, head_dim_of(cfg)
        self.num_kv_heads = cfg.num_key_value_heads
        self.gated = gated
        bias, hidden = bool(getattr(cfg, "attention_bias", False)), cfg.hidden_size
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = Linear(hidden, q_out * (2 if gated else 1), bias, quantizer, dtype, f"{prefix}.q_proj")
        self.k_proj = Linear(hidden, kv_out, bias, quantizer, dtype, f"{prefix}.k_proj")
        self.v_proj = Linear(hidden, kv_out, bias, quantizer, dtype, f"{prefix}.v_proj")
        self.o_proj = Linear(q_out, hidden, bias, quantizer, dtype, f"{prefix}.o_proj")
        norm = dict(eps=eps, dtype=dtype, deterministic=deterministic, offset=norm_offset)
        self.q_norm, self.k_norm = RMSNorm(self.head_dim, **norm), RMSNorm(self.head_dim, **norm)
        self.rotary = [rotary]  # shared module, not registered per layer
        self.layer = AttentionLayer(kv_layer_id=kv_layer_id, num_heads=self.num_heads,
                                    num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                                    scale=self.head_dim**-0.5)

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext) -> torch.Tensor:
        t = h.shape[0]
        q = self.q_proj(h)
        if self.gated:
            q, gate = q.view(t, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = self.q_norm(q.reshape(t, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(h).view(t, self.num_kv_heads, self.head_dim))
        v = self.v_proj(h).view(t, self.num_kv_heads, self.head_dim)
        rotary = self.rotary[0]
        q, k = rotary.apply(q, cos, sin), rotary.apply(k, cos, sin)
        o = ctx.attn.forward(q, k, v, self.layer, ctx.kv, ctx.batch).reshape(t, -1)
        if self.gated:
            o = o * torch.sigmoid(gate.reshape(t, -1))
        return self.o_proj(o)


class HybridDecoderLM(CausalLM):
    """The forward shared by hybrid families: ``self.model`` has ``embed_tokens``, ``layers``
    (each ``layer(h, cos, sin, ctx)``) and a final norm named ``final_norm_name``."""

    final_norm_name = "norm"

    def recurrent_modules(self) -> list[nn.Module]:
        return [m for m in self.modules() if hasattr(m, "spec") and hasattr(m, "kernels")]

    def set_recurrent_kernels(self, kernels: RecurrentKernels) -> None:
        """Swap the recurrent kernels of every layer (e.g. fla vs the torch reference)."""
        for module in self.recurrent_modules():
            module.kernels = kernels

    def forward(self, ctx: ForwardContext) -> ForwardOutput:
        batch = ctx.batch
        if batch.track_states:
            ctx.position_states = PositionStates.empty(batch.cu_extend_cpu, len(self.recurrent_layers))
        capture = set(batch.capture_hidden_layers)
        num_layers = len(self.model.layers)
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
        h = getattr(self.model, self.final_norm_name)(h)
        if num_layers in capture:
            hidden[num_layers] = h  # NOTE: HF ties the last hidden state to the final-normed one
        logits = self.lm_head(h[batch.logits_indices])
        ctx.hidden_states.update(hidden)
        return ForwardOutput(logits=logits, hidden_states=hidden, position_states=ctx.position_states)


class Qwen3_5DecoderLayer(nn.Module):
    def __init__(self, mixer_name: str, mixer: nn.Module, mlp: nn.Module, cfg: Any, dtype, deterministic):
        super().__init__()
        norm = dict(eps=cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic, offset=1.0)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.mixer_name = mixer_name
        setattr(self, mixer_name, mixer)  # "linear_attn" or "self_attn", as in the checkpoint
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.mlp = mlp

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext) -> torch.Tensor:
        x = self.input_layernorm(h)
        mixer = getattr(self, self.mixer_name)
        h = h + (mixer(x, ctx) if self.mixer_name == "linear_attn" else mixer(x, cos, sin, ctx))
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderStack(nn.Module):
    def __init__(self, embed_tokens: VocabEmbedding, layers: list[nn.Module], norm: RMSNorm) -> None:
        super().__init__()
        self.embed_tokens, self.layers, self.norm = embed_tokens, nn.ModuleList(layers), norm


class Qwen3_5ForCausalLM(HybridDecoderLM):
    deltanet_layout = "qwen3_5"

    def __init__(self, config: ModelConfig, *, quantizer: Quantizer, dtype: torch.dtype,
                 deterministic: bool = False) -> None:
        super().__init__(config)
        cfg = config.hf_config
        kernels = get_recurrent_kernels(
            str(torch.get_default_device()), deterministic=deterministic
        )
        self.rotary = RotaryEmbedding.from_config(cfg, head_dim_of(cfg))
        layers = []
        for i, kind in enumerate(cfg.layer_types[: cfg.num_hidden_layers]):
            prefix = f"model.layers.{i}"
            if kind == "linear_attention":
                mixer = GatedDeltaNet(cfg, i, len(self.recurrent_layers), quantizer, dtype, kernels,
                                      layout=self.deltanet_layout, deterministic=deterministic,
                                      prefix=f"{prefix}.linear_attn")
                self.recurrent_layers.append(mixer.spec)
                name = "linear_attn"
            elif kind == "full_attention":
                mixer = HybridAttention(cfg, len(self.attention_layers), self.rotary, quantizer, dtype,
                                        gated=True, norm_offset=1.0, eps=cfg.rms_norm_eps,
                                        deterministic=deterministic, prefix=f"{prefix}.self_attn")
                self.attention_layers.append(mixer.layer)
                name = "self_attn"
            else:
                raise ValueError(f"layer_types[{i}] = {kind!r} is not supported by {type(self).__name__}; "
                                 "expected 'linear_attention' or 'full_attention'")
            mlp = self.make_mlp(cfg, i, quantizer, dtype, deterministic, f"{prefix}.mlp")
            layers.append(Qwen3_5DecoderLayer(name, mixer, mlp, cfg, dtype, deterministic))
        embed = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, dtype)
        norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype, deterministic=deterministic, offset=1.0)
        self.model = DecoderStack(embed, layers, norm)
        self.lm_head = LMHead(cfg.vocab_size, cfg.hidden_size, dtype,
                              tied_to=embed if config.tie_word_embeddings else None, deterministic=deterministic)

    def make_mlp(self, cfg: Any, layer_idx: int, quantizer, dtype, deterministic, prefix: str) -> nn.Module:
        return GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, quantizer, dtype, prefix)

    def checkpoint_param_name(self, name: str) -> str | None:
        """Text weights under ``model.*`` or (composite layout) ``model.language_model.*``; the
        vision tower and the multi-token-prediction head (a drafter, not the LM) are ignored."""
        if name.startswith(("mtp.", "model.visual.", "visual.")):
            return None
        if name.startswith("model.language_model."):
            name = "model." + name[len("model.language_model.") :]
        return super().checkpoint_param_name(name)


class Qwen3_5ForConditionalGeneration(Qwen3_5ForCausalLM):
    """The text model of the composite checkpoint; the vision tower's weights are ignored."""

    @classmethod
    def load_hf_config(cls, path, raw: dict) -> Any:
        from transformers import AutoConfig

        composite = AutoConfig.from_pretrained(str(path))
        text = composite.get_text_config()
        text.tie_word_embeddings = bool(getattr(composite, "tie_word_embeddings", False)
                                        or getattr(text, "tie_word_embeddings", False))
        return text
