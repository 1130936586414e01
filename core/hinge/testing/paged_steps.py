"""Drive a ``CausalLM`` step by step over a paged KV pool, without the engine (for model tests).

Pages are handed out sequentially per request (page 0 stays reserved, as in the real pool) and
the pool starts filled with NaN, so a kernel that reads a slot it should not poisons its output.
"""

from __future__ import annotations

from typing import Any

import torch

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
        ids, positions, out_loc, prefix, extend, logits_idx = [], [], [], [], [], []
        for rid, tokens in steps:
            start = self.lens.get(rid, 0)
            end = start + len(tokens)
            row0 = len(ids)
            ids += list(tokens)
            positions += list(range(start, end))
            out_loc += self._slots(rid, start, end)
            prefix.append(start)
            extend.append(len(tokens))
            logits_idx += list(range(row0, len(ids))) if all_logits else [len(ids) - 1]
            self.lens[rid] = end
        max_pages = max(len(self.pages[rid]) for rid, _ in steps)
        table = torch.zeros(len(steps), max_pages, dtype=torch.int64)
        for i, (rid, _) in enumerate(steps):
            table[i, : len(self.pages[rid])] = torch.tensor(self.pages[rid])
        if all(e == 1 for e in extend):
            phase = "decode"
        elif all(p == 0 for p in prefix):
            phase = "prefill"
        else:
            phase = "mixed"
        t = lambda x: torch.tensor(x, dtype=torch.int64, device=self.device)  # noqa: E731
        return ForwardBatch(
            phase=phase, input_ids=t(ids), positions=t(positions), extend_lens=t(extend),
            prefix_lens=t(prefix), page_table=table.to(self.device), out_loc=t(out_loc),
            logits_indices=t(logits_idx), capture_hidden_layers=tuple(capture),
            extend_lens_cpu=extend, prefix_lens_cpu=prefix,
        )

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
