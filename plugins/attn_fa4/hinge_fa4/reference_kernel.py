"""``flash_attn_varlen_func`` over a paged KV cache, re-stated in plain torch: the semantics the
backend relies on, runnable anywhere (the CPU tests run the whole backend through it; on a GPU
it checks the real kernel). One virtual request at a time, float32 (float64 for float64 inputs).

Semantics (flash_attn.cute, ``interface.py``): request ``b`` owns queries
``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` and its first ``seqused_k[b]`` keys, read through
``page_table[b]`` from ``(num_pages, page_size, Hkv, D)`` pages. Masks are bottom-right aligned:
query ``i`` of ``sq`` sits at key position ``i + sk - sq``; ``causal`` hides keys after it, a
left window of ``w`` hides keys before ``position - w``. Scores are ``scale * q.k``, then
``softcap * tanh(s / softcap)``. lse is the natural log-sum-exp, ``(H, total_q)``, float32 as
flash-attn returns it (float64 for float64 inputs, so float64 tests of a split decode stay exact);
a query that sees no key gives zeros and lse -inf.
"""

from __future__ import annotations

import torch


class ReferenceKernel:
    """The ``Kernel`` interface of ``hinge_fa4.kernel`` in torch."""

    name = "reference"
    num_sms = 132  #: an H100/H200's, so ``split_kv = auto`` decides as it would there

    def varlen(self, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, *,
               cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, page_table: torch.Tensor,
               max_seqlen_q: int, softmax_scale: float, causal: bool,
               window_left: int | None = None, softcap: float | None = None,
               return_lse: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        _check_args(q, k_pages, v_pages, cu_seqlens_q, seqused_k, page_table)
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        total, heads, dim = q.shape
        _, page_size, kv_heads, _ = k_pages.shape
        rep = heads // kv_heads
        out = torch.zeros(total, heads, dim, dtype=compute, device=q.device)
        lse_dtype = torch.float64 if compute == torch.float64 else torch.float32
        lse = torch.full((heads, total), float("-inf"), dtype=lse_dtype, device=q.device)
        cu, used = cu_seqlens_q.tolist(), seqused_k.tolist()
        for b, sk in enumerate(used):
            start, end = cu[b], cu[b + 1]
            sq = end - start
            assert sq <= max_seqlen_q, f"request {b} has {sq} queries > max_seqlen_q {max_seqlen_q}"
            if sq == 0 or sk == 0:
                continue
            pages = page_table[b, :-(-sk // page_size)].long()
            # NOTE: whole pages, as the kernel loads them (a key tile is a page) and masks the
            # scores past sk: a NaN there reaches the output through 0 x NaN (reads_page_tails)
            keys = k_pages[pages].reshape(-1, kv_heads, dim).to(compute).repeat_interleave(rep, 1)
            vals = v_pages[pages].reshape(-1, kv_heads, dim).to(compute).repeat_interleave(rep, 1)
            scores = torch.einsum("ihd,jhd->hij", q[start:end].to(compute), keys) * softmax_scale
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            pos = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
            key = torch.arange(keys.shape[0], device=q.device)[None, :]
            visible = (key < sk).expand(sq, -1).clone()
            if causal:
                visible &= key <= pos
            if window_left is not None:
                visible &= key >= pos - window_left
            scores = scores.masked_fill(~visible, float("-inf"))
            row_lse = torch.logsumexp(scores, dim=-1)  # (H, sq)
            probs = torch.exp(scores - torch.where(torch.isfinite(row_lse), row_lse, 0)[..., None])
            out[start:end] = torch.einsum("hij,jhd->ihd", probs, vals)
            lse[:, start:end] = row_lse.to(lse_dtype)
        return out.to(q.dtype), (lse if return_lse else None)

    def split_decode(self, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, *,
                     seqused_k: torch.Tensor, page_table: torch.Tensor, softmax_scale: float,
                     softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``FA4Kernel.split_decode``: one query per virtual request, non-causal, lse (V, H)."""
        cu = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
        out, lse = self.varlen(q, k_pages, v_pages, cu_seqlens_q=cu, seqused_k=seqused_k,
                               page_table=page_table, max_seqlen_q=1, softmax_scale=softmax_scale,
                               causal=False, softcap=softcap, return_lse=True)
        return out, lse.t()


def _check_args(q, k_pages, v_pages, cu_seqlens_q, seqused_k, page_table) -> None:
    """The argument rules flash_attn.cute asserts, so a CPU test fails where the GPU would."""
    assert q.dim() == 3 and k_pages.dim() == 4 and v_pages.shape == k_pages.shape, (
        f"q {tuple(q.shape)} must be (total_q, H, D), k/v pages (num_pages, page_size, Hkv, D), "
        f"got {tuple(k_pages.shape)} / {tuple(v_pages.shape)}")
    assert q.dtype == k_pages.dtype == v_pages.dtype, "q, k and v must have the same dtype"
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("seqused_k", seqused_k), ("page_table", page_table)):
        assert t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}"
    assert page_table.stride(-1) == 1, "page_table must be contiguous in the last dimension"
    b = page_table.shape[0]
    assert cu_seqlens_q.shape == (b + 1,) and seqused_k.shape == (b,), (
        f"page_table has {b} rows: cu_seqlens_q must be ({b + 1},), seqused_k ({b},); got "
        f"{tuple(cu_seqlens_q.shape)} and {tuple(seqused_k.shape)}")
    assert q.shape[1] % k_pages.shape[2] == 0, "num_heads must be a multiple of num_kv_heads"
