"""Rotary position embeddings (rotate-half layout, as Hugging Face Llama/Qwen apply them).

Supported ``rope_type``: ``default``, ``linear`` and ``llama3``; ``partial_rotary_factor`` < 1
rotates only the first ``rotary_dim`` dims of each head and passes the rest through.

cos/sin come from a table built in fixed chunks of ``CHUNK`` positions, so a position's values
are the same bits whatever batch asked for it (the deterministic mode relies on that) and the
table only grows as far as the longest sequence seen.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

CHUNK = 1024
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def rope_parameters(hf_config: Any) -> dict:
    """The rope parameters of a transformers config as one dict (v5 ``rope_parameters`` or v4 keys)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    legacy = getattr(hf_config, "rope_scaling", None)
    if isinstance(legacy, dict):
        params = {**legacy, **params}
    params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    if "partial_rotary_factor" not in params and hasattr(hf_config, "partial_rotary_factor"):
        params["partial_rotary_factor"] = hf_config.partial_rotary_factor
    return params


def compute_inv_freq(params: dict, rotary_dim: int) -> torch.Tensor:
    """Inverse frequencies (rotary_dim // 2,) float32 for ``params`` (see ``rope_parameters``)."""
    rope_type = params.get("rope_type", "default")
    base = float(params["rope_theta"])
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float32) / rotary_dim
    inv_freq = 1.0 / (base**exponents)
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        factor = float(params["factor"])
        low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old_len = float(params["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, smoothed, scaled)
    raise ValueError(
        f"rope_type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}. "
        "Use a checkpoint with one of those, or add the type to hinge.layers.rotary."
    )


class RotaryEmbedding(nn.Module):
    """``forward(positions)`` -> (cos, sin), each (T, rotary_dim) float32; ``apply`` rotates q or k."""

    def __init__(self, head_dim: int, params: dict) -> None:
        super().__init__()
        factor = float(params.get("partial_rotary_factor", 1.0) or 1.0)
        self.head_dim = head_dim
        self.rotary_dim = int(head_dim * factor)
        self.register_buffer("inv_freq", compute_inv_freq(params, self.rotary_dim), persistent=False)
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    @classmethod
    def from_config(cls, hf_config: Any, head_dim: int) -> RotaryEmbedding:
        return cls(head_dim, rope_parameters(hf_config))

    def ensure_positions(self, num_positions: int) -> None:
        """Grow the cos/sin table (in whole chunks) to cover positions ``0..num_positions-1``."""
        have = 0 if self._cos is None else self._cos.shape[0]
        if have >= num_positions:
            return
        inv_freq = self.inv_freq.to(torch.float32)
        cos_parts, sin_parts = [], []
        for start in range(have, num_positions, CHUNK):
            pos = torch.arange(start, start + CHUNK, device=inv_freq.device, dtype=torch.float32)
            freqs = pos[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos_parts.append(emb.cos())
            sin_parts.append(emb.sin())
        new_cos, new_sin = torch.cat(cos_parts), torch.cat(sin_parts)
        self._cos = new_cos if self._cos is None else torch.cat([self._cos, new_cos])
        self._sin = new_sin if self._sin is None else torch.cat([self._sin, new_sin])

    def forward(self, positions: torch.Tensor, max_position: int | None = None,
                dtype: torch.dtype | None = None):
        """cos/sin rows for ``positions`` (T,), shaped (T, 1, rotary_dim) to broadcast over heads,
        in ``dtype`` (default float32): computed once per step, used by every layer.

        Pass ``max_position`` (a host int), or size the table first (``ensure_positions``), so
        nothing here waits for the device."""
        if max_position is None:
            max_position = int(positions.max()) if positions.numel() else 0
        self.ensure_positions(max_position + 1)
        if self._cos.device != positions.device:
            self._cos, self._sin = self._cos.to(positions.device), self._sin.to(positions.device)
        cos, sin = self._cos.index_select(0, positions), self._sin.index_select(0, positions)
        if dtype is not None and dtype != cos.dtype:
            cos, sin = cos.to(dtype), sin.to(dtype)
        half = self.rotary_dim // 2
        # rotate_half(x) * sin == roll(x, half) * [-sin | sin]: fold the sign into sin once
        sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)
        return cos[:, None, :], sin[:, None, :]

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` (T, heads, head_dim) with cos/sin from ``forward`` (T, 1, rotary_dim, in
        ``x``'s dtype, the sign of the rotation folded into sin); same dtype out. Three kernels:
        ``x * cos + roll(x, half) * sin``."""
        half = self.rotary_dim // 2
        if self.rotary_dim == self.head_dim:
            return torch.addcmul(x * cos, x.roll(half, dims=-1), sin)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        return torch.cat([torch.addcmul(rot * cos, rot.roll(half, dims=-1), sin), rest], dim=-1)

    def apply_qk(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """``apply`` to q (T, Hq, D) and k (T, Hk, D) in one pass over their concatenation."""
        qk = self.apply(torch.cat([q, k], dim=1), cos, sin)
        return qk.split([q.shape[1], k.shape[1]], dim=1)
