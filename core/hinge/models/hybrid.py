"""What hybrid families (Qwen3.5, Qwen3-Next, LFM2) share: ``HybridAttention`` (full attention
with one ``qkv_proj`` GEMM, per-head q/k RMSNorm, partial rotary, optional sigmoid output gate)
and ``HybridDecoderLM``, the ``DecoderStackLM`` with recurrent layers: swappable recurrent
kernels and, with ``track_states``, the per-position states a speculator's verify needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hinge.contracts import AttentionLayer
from hinge.forward import PositionStates
from hinge.layers import SINGLE, Linear, RMSNorm, RotaryEmbedding, TensorParallel
from hinge.models.dense import head_dim_of, logit_softcap_of, norm_rope_attend, qkv_linear
from hinge.models.stack import DecoderStackLM

if TYPE_CHECKING:
    from hinge.contracts import Quantizer
    from hinge.forward import ForwardContext, ForwardOutput
    from hinge.layers.recurrent_kernels import RecurrentKernels
    from hinge.plugins.capabilities import GraphVerdict

#: recurrent kernels whose one-token decode path is device work only (no host list, no .item())
GRAPH_SAFE_DECODE_KERNELS = ("auto", "torch", "fla")


class HybridAttention(nn.Module):
    """Full attention over the KV pool with per-head q/k RMSNorm, (partial) rotary, optional gate."""

    def __init__(self, cfg: Any, kv_layer_id: int, rotary: RotaryEmbedding, quantizer: Quantizer,
                 dtype: torch.dtype, *, gated: bool, norm_offset: float, eps: float,
                 deterministic: bool, prefix: str, tp: TensorParallel = SINGLE) -> None:
        super().__init__()
        self.head_dim = head_dim_of(cfg)
        self.num_heads = tp.split(cfg.num_attention_heads, "num_attention_heads")
        self.num_kv_heads = tp.split(cfg.num_key_value_heads, "num_key_value_heads")
        self.gated = gated
        bias, hidden = bool(getattr(cfg, "attention_bias", False)), cfg.hidden_size
        q_out, kv_out = cfg.num_attention_heads * self.head_dim, cfg.num_key_value_heads * self.head_dim
        # a gated q_proj emits [q | gate] per head: whole heads stay together when split by rows
        q_rows = q_out * (2 if gated else 1)
        self.qkv_proj = qkv_linear(hidden, (q_rows, kv_out, kv_out), bias, quantizer, dtype, prefix, tp)
        self.o_proj = Linear(q_out, hidden, bias, quantizer, dtype, f"{prefix}.o_proj", parallel="row", tp=tp)
        self.sizes = [size // tp.world_size for size in (q_rows, kv_out, kv_out)]
        norm = dict(eps=eps, dtype=dtype, deterministic=deterministic, offset=norm_offset)
        self.q_norm, self.k_norm = RMSNorm(self.head_dim, **norm), RMSNorm(self.head_dim, **norm)
        self.rotary = [rotary]  # shared module, not registered per layer
        self.layer = AttentionLayer(kv_layer_id=kv_layer_id, num_heads=self.num_heads,
                                    num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                                    scale=self.head_dim**-0.5, logit_softcap=logit_softcap_of(cfg))

    def forward(self, h: torch.Tensor, cos, sin, ctx: ForwardContext) -> torch.Tensor:
        t = h.shape[0]
        q, k, v = self.qkv_proj(h).split(self.sizes, dim=-1)
        if self.gated:
            q, gate = q.reshape(t, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        o = norm_rope_attend(self.q_norm, self.k_norm, self.rotary[0],
                             q.reshape(t, self.num_heads, self.head_dim),
                             k.reshape(t, self.num_kv_heads, self.head_dim),
                             v.reshape(t, self.num_kv_heads, self.head_dim), cos, sin, self.layer,
                             ctx).reshape(t, -1)
        if self.gated:
            o = o * torch.sigmoid(gate.reshape(t, -1))
        return self.o_proj(o)


class HybridLayer(nn.Module):
    """A hybrid decoder layer's mixer, kept under its checkpoint name (``set_mixer``): full
    attention (``self_attn``) is called ``mixer(x, cos, sin, ctx)``, a recurrent one ``mixer(x, ctx)``."""

    def set_mixer(self, name: str, mixer: nn.Module) -> None:
        self.mixer_name = name
        setattr(self, name, mixer)

    def mix(self, x: torch.Tensor, cos, sin, ctx: ForwardContext) -> torch.Tensor:
        mixer = getattr(self, self.mixer_name)
        return mixer(x, cos, sin, ctx) if self.mixer_name == "self_attn" else mixer(x, ctx)


class HybridDecoderLM(DecoderStackLM):
    """What hybrid families add to ``DecoderStackLM``: recurrent kernels and, with
    ``track_states``, the per-position states a speculator's verify needs."""

    recurrent_kind: str  #: the ``layer_types`` entry of the recurrent mixer, e.g. "conv"
    recurrent_name: str  #: its module name in the checkpoint, e.g. "conv" or "linear_attn"

    def build_mixers(
        self,
        cfg: Any,
        make_recurrent: Callable[[int, int, str], nn.Module],
        make_attention: Callable[[int, str], nn.Module],
    ) -> list[tuple[str, nn.Module]]:
        """One ``(checkpoint name, mixer)`` per ``cfg.layer_types`` entry, numbering the mixers:
        ``make_recurrent(layer_idx, state_id, prefix)`` builds a recurrent one (its ``spec`` goes to
        ``recurrent_layers``), ``make_attention(kv_layer_id, prefix)`` a full-attention one (its
        ``layer`` goes to ``attention_layers``)."""
        mixers: list[tuple[str, nn.Module]] = []
        for i, kind in enumerate(cfg.layer_types[: cfg.num_hidden_layers]):
            prefix = f"model.layers.{i}"
            if kind == self.recurrent_kind:
                mixer = make_recurrent(i, len(self.recurrent_layers), f"{prefix}.{self.recurrent_name}")
                self.recurrent_layers.append(mixer.spec)
                mixers.append((self.recurrent_name, mixer))
            elif kind == "full_attention":
                mixer = make_attention(len(self.attention_layers), f"{prefix}.self_attn")
                self.attention_layers.append(mixer.layer)
                mixers.append(("self_attn", mixer))
            else:
                raise ValueError(f"layer_types[{i}] = {kind!r} is not supported by {type(self).__name__}; "
                                 f"expected {self.recurrent_kind!r} or 'full_attention'")
        return mixers

    @classmethod
    def graph_capture_eligibility(cls, phase: str, *, tokens_per_request: tuple[int, ...] = (1,),
                                  kernels: str = "auto") -> GraphVerdict | None:
        """Decode graphs when the recurrent decode path has no host work; never prefill graphs
        (their chunk layout is built on the host). See ``hinge.models.graph_votes``."""
        from hinge.plugins.capabilities import GraphVerdict

        layers = f"{cls.recurrent_kind!r} layers"
        if phase == "prefill":
            return GraphVerdict(allow=False, reason=(
                f"{layers} build the chunk and conv layout of a variable-length prefill on the host "
                "every step (index tensors from cu_seqlens, fla's chunk indices); a prefill graph "
                "needs them computed outside the graph, so prefill runs eager"))
        if phase != "decode":
            return None
        if kernels not in GRAPH_SAFE_DECODE_KERNELS:
            return GraphVerdict(allow=False, reason=(
                f"recurrent kernels {kernels!r} do not declare a graph-safe decode path (known: "
                f"{', '.join(GRAPH_SAFE_DECODE_KERNELS[1:])})"))
        several = [q for q in tokens_per_request if q > 1]
        if several and cls.recurrent_kind != "conv":
            return GraphVerdict(allow=False, reason=(
                f"graphs.tokens_per_request {several}: the gated delta rule over several tokens per "
                "request runs its chunked path, whose layout is built on the host; set "
                "graphs.tokens_per_request to [1]"))
        return GraphVerdict(allow=True)

    def warmup_prompt_lengths(self) -> tuple[int, ...]:
        """What the recurrent layers' kernels ask for (``RecurrentKernels.warmup_prompt_lengths``)."""
        return tuple(sorted({n for m in self.recurrent_modules()
                             for n in m.kernels.warmup_prompt_lengths()}))

    def recurrent_modules(self) -> list[nn.Module]:
        return [m for m in self.modules() if hasattr(m, "spec") and hasattr(m, "kernels")]

    def set_recurrent_kernels(self, kernels: RecurrentKernels) -> None:
        """Swap the recurrent kernels of every layer (e.g. fla vs the torch reference)."""
        for module in self.recurrent_modules():
            module.kernels = kernels

    def forward(self, ctx: ForwardContext) -> ForwardOutput:
        if ctx.batch.track_states:
            ctx.position_states = PositionStates.empty(ctx.batch.cu_extend_cpu, len(self.recurrent_layers))
        return super().forward(ctx)
