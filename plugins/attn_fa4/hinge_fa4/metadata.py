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
    num_chunks: int  #: chunk slots per row of a split decode graph (0 = graphs never split)
    chunk_pages: torch.Tensor  #: (R * num_chunks, split_size / page_size) int32
    chunk_used: torch.Tensor  #: (R * num_chunks,) int32
    tail_pages: torch.Tensor  #: (R, max_pages) int32
    tail_used: torch.Tensor  #: (R,) int32

    @classmethod
    def allocate(cls, rows: int, max_pages: int, num_chunks: int, pages_per_chunk: int,
                 device: torch.device) -> FA4GraphBuffers:
        def ints(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int32, device=device)

        return cls(ints(rows), ints(rows, max_pages), num_chunks,
                   ints(rows * num_chunks, pages_per_chunk), ints(rows * num_chunks),
                   ints(rows, max_pages), ints(rows))

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
        if uniform and split and self.num_chunks:
            c = self.num_chunks
            meta.split = SplitTensors(
                c, q_len, self.chunk_pages[:rows * c], self.chunk_used[:rows * c],
                torch.arange(rows * c + 1, dtype=torch.int32, device=device) * q_len,
                self.tail_pages[:rows], self.tail_used[:rows], cu)
        return meta
