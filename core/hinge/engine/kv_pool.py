"""Paged KV storage: one K and one V tensor per attention layer, addressed by flat slot.

Slot ``page * page_size + offset`` holds one token's keys/values for every layer. Page 0 is
reserved (a dummy page padded graph rows may point at), so usable pages are ``1..num_pages-1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    k: list[torch.Tensor]  #: per attention layer: (num_pages * page_size, num_kv_heads, head_dim)
    v: list[torch.Tensor]
    page_size: int

    @property
    def num_pages(self) -> int:
        return self.k[0].shape[0] // self.page_size if self.k else 0
