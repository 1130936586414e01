"""Per-step metadata of the fa4 backend: what one ``flash_attn_varlen_func`` call over the whole
step needs (int32, as flash-attn asserts), plus the split layout of decode steps that split."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hinge_fa4.split import SplitTensors


@dataclass
class FA4Metadata:
    """One step: B request rows (a captured graph: its R rows, padding included)."""

    cu_seqlens_q: torch.Tensor  #: (B + 1,) int32 query offsets
    seqused_k: torch.Tensor  #: (B,) int32 keys per request (prefix + new tokens)
    page_table: torch.Tensor  #: (B, max_pages) int32 page ids per request
    max_seqlen_q: int  #: most queries of a request (a captured prefill shape: its token count)
    #: decode and verify steps that split their keys (``hinge_fa4.split``); None = one call
    split: SplitTensors | None = None
    #: decode-shaped: every row has ``max_seqlen_q`` queries (``cu_seqlens_q`` is fixed)
    uniform: bool = False


@dataclass
class FA4GraphBuffers:
    """Static tensors every captured shape's metadata views (sized for the largest shape)."""

    seqused_k: torch.Tensor  #: (R,) int32
    page_table: torch.Tensor  #: (R, max_pages) int32
    num_slots: int  #: part slots per query row of a split decode graph (0 = graphs never split)
    split_pages: torch.Tensor  #: (N * num_slots, part width) int32, N = most tokens of a graph
    split_used: torch.Tensor  #: (N * num_slots,) int32
    split_parts: torch.Tensor  #: (N,) int32

    @classmethod
    def allocate(cls, rows: int, tokens: int, max_pages: int, num_slots: int, width: int,
                 device: torch.device) -> FA4GraphBuffers:
        def ints(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int32, device=device)

        return cls(ints(rows), ints(rows, max_pages), num_slots, ints(tokens * num_slots, width),
                   ints(tokens * num_slots), ints(tokens))

    def metadata(self, rows: int, num_tokens: int, q_len: int | None, split: bool) -> FA4Metadata:
        """Views for a shape of ``rows`` request rows and ``num_tokens`` token rows; ``q_len``
        = queries per row of a decode-shaped graph (None: prefill-shaped, any lengths)."""
        device = self.seqused_k.device
        uniform = q_len is not None
        cu = torch.zeros(rows + 1, dtype=torch.int32, device=device)
        if uniform:
            cu.copy_(torch.arange(rows + 1, dtype=torch.int32, device=device) * q_len)
        meta = FA4Metadata(cu, self.seqused_k[:rows], self.page_table[:rows],
                           q_len if uniform else num_tokens, uniform=uniform)
        if uniform and split and self.num_slots:
            v = rows * q_len * self.num_slots
            meta.split = SplitTensors(self.num_slots, q_len, self.split_pages[:v],
                                      self.split_used[:v], self.split_parts[:rows * q_len])
        return meta
