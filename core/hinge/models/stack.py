"""The decoder stack every family runs: ``DecoderStack`` (the checkpoint's ``model.*``) and
``DecoderStackLM``, whose ``forward`` is embeddings -> layers -> final norm -> ``lm_head`` on the
``logits_indices`` rows, capturing the hidden states ``capture_hidden_layers`` asks for (numbered
as ``hinge.models.base`` says).

A subclass builds ``self.rotary``, its layers and then calls ``build_stack``; the final norm's
checkpoint name is ``final_norm_name``.

Residual passing (sglang's): a layer is called ``layer(h, cos, sin, ctx, residual) -> (out,
residual)`` and the hidden state after it is ``out + residual``, never formed unless captured.
Each add rides in the next norm (``RMSNorm(x, residual)``: one fused kernel on CUDA, the same add
then norm elsewhere), so a pre-norm layer costs two fused add+norms and no bare add
(``pre_norm_layer``); the first layer gets ``residual=None``, the final norm takes the last pair.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from hinge.forward import ForwardOutput
from hinge.layers import LMHead, RMSNorm, VocabEmbedding
from hinge.models.base import CausalLM

if TYPE_CHECKING:
    from hinge.forward import ForwardContext


def pre_norm_layer(norm1: RMSNorm, mix, norm2: RMSNorm, ffn, h: torch.Tensor,
                   residual: torch.Tensor | None, *mix_args) -> tuple[torch.Tensor, torch.Tensor]:
    """``h + residual -> +mix(norm1(.)) -> +ffn(norm2(.))`` as ``(ffn output, residual)``: the
    adds ride in the norms. Bit for bit what the three adds written out give (the add commutes)."""
    x, residual = (norm1(h), h) if residual is None else norm1(h, residual)
    x, residual = norm2(mix(x, *mix_args), residual)
    return ffn(x), residual


class DecoderStack(nn.Module):
    """The ``model.*`` part of the checkpoint: embeddings, layers, final norm (named ``norm_name``)."""

    def __init__(self, embed_tokens: VocabEmbedding, layers: list[nn.Module], norm: RMSNorm,
                 norm_name: str = "norm") -> None:
        super().__init__()
        self.embed_tokens, self.layers = embed_tokens, nn.ModuleList(layers)
        self.norm_name = norm_name
        setattr(self, norm_name, norm)

    @property
    def final_norm(self) -> nn.Module:
        return getattr(self, self.norm_name)


class DecoderStackLM(CausalLM):
    final_norm_name = "norm"

    def ensure_positions(self, num_positions: int) -> None:
        """Build the rotary table up to ``num_positions`` now. The engine calls it once with
        ``max_model_len``, so no step grows it (a new table would be a tensor a captured graph
        does not see, and growing it is work on the hot path)."""
        self.rotary.ensure_positions(num_positions)

    def build_stack(self, embed: VocabEmbedding, layers: list[nn.Module], norm: RMSNorm, *,
                    dtype: torch.dtype, deterministic: bool) -> None:
        """Set ``self.model`` and ``self.lm_head`` (tied to ``embed`` when the config says so)."""
        cfg = self.config.hf_config
        self.model = DecoderStack(embed, layers, norm, self.final_norm_name)
        self.lm_head = LMHead(
            cfg.vocab_size, cfg.hidden_size, dtype,
            tied_to=embed if self.config.tie_word_embeddings else None, deterministic=deterministic,
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
        cos, sin = self.rotary(batch.positions, max_pos, dtype=h.dtype)
        residual = None
        for i, layer in enumerate(self.model.layers):
            h, residual = layer(h, cos, sin, ctx, residual)
            if i + 1 in capture and i + 1 < num_layers:
                hidden[i + 1] = h + residual
        h = self.model.final_norm(h) if residual is None else self.model.final_norm(h, residual)[0]
        if num_layers in capture:
            hidden[num_layers] = h  # NOTE: HF ties the last hidden state to the final-normed one
        logits = self.lm_head(h.index_select(0, batch.logits_indices))
        ctx.hidden_states.update(hidden)
        return ForwardOutput(logits=logits, hidden_states=hidden, position_states=ctx.position_states)
