"""Build a ForwardBatch plus a paged KV cache from request lengths, with seeded random data.

Each request's data (q, k, v for every one of its positions) comes from its own seed, so the
same request gives the same numbers whether it runs alone, in a batch, or after a cached prefix:
that is what batch-invariance tests compare. Pages are assigned in a shuffled order (page 0 is
reserved), so a backend that assumes contiguous pages fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hinge.batching import ForwardBatchBuilder, StepSeq
from hinge.contracts import AttentionLayer
from hinge.forward import ForwardBatch, KVCache

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass
class BatchCase:
    batch: ForwardBatch
    kv: KVCache
    layer: AttentionLayer
    q: torch.Tensor  #: (T, num_heads, head_dim) new queries
    k: torch.Tensor  #: (T, num_kv_heads, head_dim) new keys (not yet in ``kv``)
    v: torch.Tensor

    def rows_of(self, i: int) -> slice:
        """Rows of request ``i`` in the step's T rows."""
        cu = self.batch.cu_extend_cpu
        return slice(cu[i], cu[i + 1])


#: what the kit writes past a request's length in its last page for a backend that declares
#: ``reads_page_tails`` (finite, and far from the data: a read that is not masked shows)
PAGE_TAIL_FILL = 100.0


def page_tail_fill(capabilities: Any) -> float | None:
    """``PAGE_TAIL_FILL`` for a backend whose capabilities declare ``reads_page_tails``, else
    None (those slots stay NaN)."""
    return PAGE_TAIL_FILL if getattr(capabilities, "reads_page_tails", False) else None


def fill_page_tails(k_cache: torch.Tensor, v_cache: torch.Tensor, pages: Sequence[int],
                    seq_len: int, page_size: int, value: float) -> None:
    """Write ``value`` into the slots of ``pages``' last page past ``seq_len`` keys."""
    if not pages or seq_len % page_size == 0:
        return
    start = pages[-1] * page_size
    k_cache[start + seq_len % page_size:start + page_size] = value
    v_cache[start + seq_len % page_size:start + page_size] = value


def build_batch(
    prefix_lens: Sequence[int],
    extend_lens: Sequence[int],
    *,
    layer: AttentionLayer | None = None,
    phase: str | None = None,
    page_size: int = 16,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seeds: Sequence[int] | None = None,
    spare_pages: int = 3,
    page_seed: int = 0,
    page_tail_fill: float | None = None,
) -> BatchCase:
    """A batch of ``len(prefix_lens)`` requests: request ``i`` has ``prefix_lens[i]`` tokens
    already in the KV cache and ``extend_lens[i]`` new ones.

    :param layer: the attention layer (kv_layer_id picks the cache layer); default 4 heads,
        2 KV heads, head_dim 16.
    :param seeds: per-request data seeds (default ``0..B-1``).
    :param page_tail_fill: the value of the slots of each request's last page past its length
        (default NaN like every unwritten slot; ``PAGE_TAIL_FILL`` for a backend that declares
        ``reads_page_tails``).
    """
    layer = layer or AttentionLayer(kv_layer_id=0, num_heads=4, num_kv_heads=2, head_dim=16,
                                    scale=16 ** -0.5)
    b = len(prefix_lens)
    assert len(extend_lens) == b, f"{len(prefix_lens)} prefix lens but {len(extend_lens)} extend lens"
    seeds = list(range(b)) if seeds is None else list(seeds)
    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens, strict=True)]
    pages_per_req = [-(-s // page_size) for s in seq_lens]
    num_pages = 1 + sum(pages_per_req) + spare_pages
    order = torch.randperm(num_pages - 1, generator=torch.Generator().manual_seed(page_seed)) + 1
    h, g, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
    num_layers = layer.kv_layer_id + 1
    # NOTE: unused slots hold NaN so a backend that reads a slot it should not shows it
    k_cache = [torch.full((num_pages * page_size, g, d), float("nan"), dtype=dtype) for _ in range(num_layers)]
    v_cache = [torch.full((num_pages * page_size, g, d), float("nan"), dtype=dtype) for _ in range(num_layers)]
    ids = torch.randint(0, 100, (sum(extend_lens),), generator=torch.Generator().manual_seed(7)).tolist()
    qs, ks, vs, seqs = [], [], [], []
    used = 0
    for i, (prefix, seq) in enumerate(zip(prefix_lens, seq_lens, strict=True)):
        pages = order[used : used + pages_per_req[i]]
        used += pages_per_req[i]
        slots = (pages[:, None] * page_size + torch.arange(page_size)[None, :]).reshape(-1)[:seq]
        gen = torch.Generator().manual_seed(1000 + seeds[i])
        q_all = torch.randn(seq, h, d, generator=gen).to(dtype)
        k_all = torch.randn(seq, g, d, generator=gen).to(dtype)
        v_all = torch.randn(seq, g, d, generator=gen).to(dtype)
        k_cache[layer.kv_layer_id][slots[:prefix]] = k_all[:prefix]
        v_cache[layer.kv_layer_id][slots[:prefix]] = v_all[:prefix]
        if page_tail_fill is not None:
            fill_page_tails(k_cache[layer.kv_layer_id], v_cache[layer.kv_layer_id], pages.tolist(),
                            seq, page_size, page_tail_fill)
        qs.append(q_all[prefix:])
        ks.append(k_all[prefix:])
        vs.append(v_all[prefix:])
        start = sum(extend_lens[:i])
        seqs.append(StepSeq(row=i + 1, prefix_len=prefix, extend_len=seq - prefix,
                            pages=pages.tolist(), new_tokens=ids[start:start + seq - prefix],
                            sample=seq > prefix))
    builder = ForwardBatchBuilder(page_size=page_size, max_rows=b + 1,
                                  max_pages=max(max(pages_per_req, default=1), 1), device=device)
    batch = builder.build(seqs, phase=phase)  # type: ignore[arg-type]
    to = torch.device(device)
    kv = KVCache([t.to(to) for t in k_cache], [t.to(to) for t in v_cache], page_size)
    return BatchCase(batch, kv, layer, torch.cat(qs).to(to), torch.cat(ks).to(to), torch.cat(vs).to(to))
