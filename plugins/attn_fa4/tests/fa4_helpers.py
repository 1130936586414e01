"""Shared by the fa4 tests: the fa4 spec re-declared for the torch emulation of the kernel
(``kernel: reference``) so the whole backend runs through the contract kit on CPU, and a plain
float64 attention to compare split decodes with."""

from __future__ import annotations

import torch

from hinge_fa4.plugin import FA4_SPEC


def reference_spec(page_sizes=frozenset({16, 128}), dtypes=frozenset({"float32", "bfloat16"}),
                   head_dims=frozenset({16, 64})):
    """fa4's spec as the emulated kernel runs it: on CPU, in float32 too, at small page sizes
    and head dims (the real claims are tested on a GPU by test_fa4_gpu.py), without the
    availability check (the emulation needs no flash-attn-4)."""
    caps = FA4_SPEC.capabilities.model_copy(update={
        "devices": frozenset({"cpu"}), "dtypes": dtypes, "page_sizes": page_sizes,
        "preferred_page_sizes": (), "head_dims": head_dims, "min_compute_capability": None})
    return FA4_SPEC.model_copy(update={"capabilities": caps, "availability": None})


def attention_f64(q, keys, vals, positions, *, scale, causal=True, window=None, softcap=None):
    """(E, H, D) float64: queries at ``positions`` over keys ``0..S-1``, GQA by repetition."""
    rep = q.shape[1] // keys.shape[1]
    k = keys.double().repeat_interleave(rep, 1)
    v = vals.double().repeat_interleave(rep, 1)
    s = torch.einsum("ehd,shd->hes", q.double(), k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    key = torch.arange(keys.shape[0])[None, :]
    pos = torch.as_tensor(positions)[:, None]
    visible = torch.ones(s.shape[1:], dtype=torch.bool)
    if causal:
        visible &= key <= pos
    if window is not None:
        visible &= key > pos - window
    p = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.einsum("hes,shd->ehd", p, v)
