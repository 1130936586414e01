"""Drive a ``CausalLM`` step by step over a paged KV pool, without the engine (for model tests).

Pages are handed out sequentially per request (page 0 stays reserved, as in the real pool) and
the pool starts filled with NaN, so a kernel that reads a slot it should not poisons its output.
"""

from __future__ import annotations

from typing import Any

import torch

from hinge.batching import ForwardBatchBuilder, StepSeq
from hinge.forward import ForwardBatch, ForwardContext, ForwardOutput, KVCache


class PagedSteps:
    def __init__(
        self,
        model: Any,
        attn: Any,
        *,
        page_size: int = 16,
        num_pages: int = 256,
        dtype: torch.dtype | None = None,
        device: str | torch.device = "cpu",
        fill: float = float("nan"),
        max_requests: int = 64,
    ) -> None:
        self.model, self.attn, self.page_size, self.device = model, attn, page_size, torch.device(device)
        dtype = dtype or model.dtype
        shape = lambda layer: (num_pages * page_size, layer.num_kv_heads, layer.head_dim)  # noqa: E731
        self.kv = KVCache(
            k=[torch.full(shape(a), fill, dtype=dtype, device=device) for a in model.attention_layers],
            v=[torch.full(shape(a), fill, dtype=dtype, device=device) for a in model.attention_layers],
            page_size=page_size,
        )
        self.num_pages = num_pages
        self.next_page = 1
        self.builder = ForwardBatchBuilder(page_size=page_size, max_rows=max_requests + 1,
                                           max_pages=num_pages, device=device)
        self.rows: dict[Any, int] = {}
        self.pages: dict[Any, list[int]] = {}
        self.lens: dict[Any, int] = {}

    def _slots(self, rid: Any, start: int, end: int) -> list[int]:
        pages = self.pages.setdefault(rid, [])
        while len(pages) * self.page_size < end:
            assert self.next_page < self.num_pages, f"test pool of {self.num_pages} pages is full"
            pages.append(self.next_page)
            self.next_page += 1
        return [pages[p // self.page_size] * self.page_size + p % self.page_size for p in range(start, end)]

    def batch(
        self, steps: list[tuple[Any, list[int]]], *, all_logits: bool = True, capture: tuple[int, ...] = ()
    ) -> ForwardBatch:
        """A batch extending request ``rid`` by ``tokens`` for each ``(rid, tokens)``; commits lengths."""
        seqs = []
        for rid, tokens in steps:
            start = self.lens.get(rid, 0)
            end = start + len(tokens)
            self._slots(rid, start, end)
            row = self.rows.setdefault(rid, len(self.rows) + 1)
            seqs.append(StepSeq(
                row=row, prefix_len=start, extend_len=len(tokens), pages=self.pages[rid],
                new_tokens=list(tokens), logits_rows=range(len(tokens)) if all_logits else (),
                sample=not all_logits))
            self.lens[rid] = end
        return self.builder.build(seqs, capture_hidden_layers=tuple(capture))

    @torch.no_grad()
    def step(self, steps: list[tuple[Any, list[int]]], **kwargs: Any) -> ForwardOutput:
        """Run one forward step; logits rows follow ``steps`` order (every new token by default)."""
        batch = self.batch(steps, **kwargs)
        batch.attn_metadata = self.attn.prepare_metadata(batch)
        return self.model(ForwardContext(batch=batch, attn=self.attn, kv=self.kv))

    def split(self, out: ForwardOutput, steps: list[tuple[Any, list[int]]]) -> list[torch.Tensor]:
        """Per-request logits of a step run with ``all_logits=True``."""
        sizes = [len(tokens) for _, tokens in steps]
        return list(out.logits.split(sizes))
