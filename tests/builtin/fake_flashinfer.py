"""A stand-in for the ``flashinfer`` module on CPU: its two paged wrappers, with flashinfer's
documented semantics computed in float64 torch.

What it holds the backend to, as flashinfer does: the paged-KV CSR layout (int32 ``qo_indptr``,
``kv_indptr``, ``kv_indices``, ``last_page_len``; a request with no page has length 0), NHD views
``(num_pages, page_size, kv_heads, head_dim)``, causal masks aligned bottom-right, ``window_left``
(keys ``p - window_left .. p``), ``sm_scale``, the dtype planned, and in ``use_cuda_graph`` mode a
batch size fixed by the buffers, plans that copy into those buffers, and runs that read only them.

A CUDA graph is imitated: while ``recording`` is a list, every ``run`` also appends a thunk that
recomputes its output in place from the wrapper's buffers, as a replayed kernel reads its tables
by address; ``replay()`` runs the thunks.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import torch


class FakeFlashInfer(ModuleType):
    """``FakeFlashInfer()`` is used as the ``flashinfer`` module; it counts what happens."""

    def __init__(self) -> None:
        super().__init__("flashinfer")
        fake = self
        self.wrappers: list[Any] = []
        self.plans: list[tuple[Any, dict]] = []
        self.runs: list[tuple[Any, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []
        self.recording: list | None = None

        class Prefill(_Wrapper):
            kind = "prefill"

            def __init__(self, workspace, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                         paged_kv_indptr_buf=None, paged_kv_indices_buf=None,
                         paged_kv_last_page_len_buf=None, backend="auto"):
                super().__init__(fake, workspace, kv_layout, use_cuda_graph, qo_indptr_buf,
                                 paged_kv_indptr_buf, paged_kv_indices_buf,
                                 paged_kv_last_page_len_buf)
                self.backend = backend

            def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
                     num_qo_heads, num_kv_heads, head_dim_qk, page_size, *, causal=False,
                     sm_scale=None, window_left=-1, logits_soft_cap=None, q_data_type="float16",
                     kv_data_type=None, seq_lens=None):
                self._plan(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
                           num_qo_heads, num_kv_heads, head_dim_qk, page_size, causal, sm_scale,
                           window_left, logits_soft_cap, q_data_type, kv_data_type, seq_lens)

        class Decode(_Wrapper):
            kind = "decode"

            def __init__(self, workspace, kv_layout="NHD", use_cuda_graph=False,
                         use_tensor_cores=False, paged_kv_indptr_buffer=None,
                         paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                         backend="auto"):
                super().__init__(fake, workspace, kv_layout, use_cuda_graph, None,
                                 paged_kv_indptr_buffer, paged_kv_indices_buffer,
                                 paged_kv_last_page_len_buffer)
                self.use_tensor_cores = use_tensor_cores

            def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                     page_size, *, window_left=-1, logits_soft_cap=None, q_data_type="float16",
                     kv_data_type=None, sm_scale=None, seq_lens=None, disable_split_kv=False):
                self.disable_split_kv = disable_split_kv  # a schedule choice: the same results
                b = len(last_page_len)
                qo = torch.arange(b + 1, dtype=torch.int32)
                self._plan(qo, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                           page_size, True, sm_scale, window_left, logits_soft_cap, q_data_type,
                           kv_data_type, seq_lens)
                assert all(1 <= n <= page_size for n in last_page_len.tolist()), (
                    f"decode needs 1 <= last_page_len <= page_size, got {last_page_len.tolist()}")

        self.BatchPrefillWithPagedKVCacheWrapper = Prefill
        self.BatchDecodeWithPagedKVCacheWrapper = Decode

    def replay(self) -> None:
        assert self.recording is not None, "nothing was captured"
        for thunk in self.recording:
            thunk()


def _int32(t: torch.Tensor, name: str) -> torch.Tensor:
    assert t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}"
    return t


class _Wrapper:
    kind = ""

    def __init__(self, fake, workspace, kv_layout, use_cuda_graph, qo_buf, indptr_buf, indices_buf,
                 last_buf):
        assert kv_layout == "NHD", f"hinge's pool is NHD, the wrapper was built for {kv_layout}"
        assert workspace.dtype == torch.uint8
        self.fake, self.use_cuda_graph = fake, use_cuda_graph
        self.bufs = {"qo": qo_buf, "indptr": indptr_buf, "indices": indices_buf, "last": last_buf}
        self.fixed_batch_size = None
        if use_cuda_graph:
            assert indptr_buf is not None and indices_buf is not None and last_buf is not None
            self.fixed_batch_size = len(last_buf)
            assert len(indptr_buf) == self.fixed_batch_size + 1
            if qo_buf is not None:
                assert len(qo_buf) == self.fixed_batch_size + 1
        self.max_rows: int | None = None
        self.planned: dict | None = None
        fake.wrappers.append(self)

    def _plan(self, qo, indptr, indices, last, heads, kv_heads, head_dim, page_size, causal,
              sm_scale, window_left, soft_cap, q_dtype, kv_dtype, seq_lens):
        for t, name in ((qo, "qo_indptr"), (indptr, "kv_indptr"), (indices, "kv_indices"),
                        (last, "last_page_len")):
            _int32(t, name)
        b = len(last)
        assert len(indptr) == b + 1 == len(qo) and heads % kv_heads == 0
        assert int(indptr[-1]) <= len(indices), "kv_indptr points past kv_indices"
        if seq_lens is not None:  # flashinfer's get_seq_lens: clamp(pages - 1, 0) * ps + last
            pages = indptr[1:] - indptr[:-1]
            expected = (pages - 1).clamp(min=0) * page_size + last
            assert torch.equal(_int32(seq_lens, "seq_lens"), expected.int()), (
                f"seq_lens {seq_lens.tolist()} != lengths of the layout {expected.tolist()}")
        if self.use_cuda_graph:
            if b != self.fixed_batch_size:
                raise ValueError(f"batch size {b} != {self.fixed_batch_size} fixed by the buffers")
            rows = int(qo[-1])
            self.max_rows = rows if self.max_rows is None else self.max_rows
            if rows > self.max_rows:
                raise ValueError(f"{rows} rows > {self.max_rows} planned at capture")
            if self.bufs["qo"] is not None:
                self.bufs["qo"].copy_(qo)
            self.bufs["indptr"].copy_(indptr)
            self.bufs["last"].copy_(last)
            self.bufs["indices"][: len(indices)].copy_(indices)
        else:
            self.bufs = {"qo": qo.clone(), "indptr": indptr.clone(), "indices": indices.clone(),
                         "last": last.clone()}
        self.planned = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, page_size=page_size,
                            causal=causal, sm_scale=sm_scale, window_left=window_left,
                            soft_cap=soft_cap, q_dtype=q_dtype, kv_dtype=kv_dtype or q_dtype,
                            batch_size=b)
        self.fake.plans.append((self, dict(self.planned)))

    def run(self, q, paged_kv, *, out=None):
        assert self.planned is not None, "run before plan"
        assert isinstance(paged_kv, tuple) and len(paged_kv) == 2, "expects (k_cache, v_cache)"
        k4, v4 = paged_kv
        p = self.planned
        assert k4.dim() == 4 and k4.shape[1:] == (p["page_size"], p["kv_heads"], p["head_dim"]), (
            f"NHD cache must be (pages, {p['page_size']}, {p['kv_heads']}, {p['head_dim']}), "
            f"got {tuple(k4.shape)}")
        assert q.dtype == p["q_dtype"] and k4.dtype == p["kv_dtype"], "dtype differs from the plan"
        assert q.shape[1:] == (p["heads"], p["head_dim"]) and q.is_contiguous()
        out = torch.empty_like(q) if out is None else out
        assert out.shape == q.shape and out.dtype == q.dtype
        self.fake.runs.append((self, q, paged_kv))
        self._compute(q, k4, v4, out)
        if self.fake.recording is not None:
            self.fake.recording.append(lambda: self._compute(q, k4, v4, out))
        return out

    def _compute(self, q, k4, v4, out):
        p, bufs = self.planned, self.bufs
        b = p["batch_size"]
        qo = list(range(b + 1)) if self.kind == "decode" else bufs["qo"][: b + 1].tolist()
        indptr = bufs["indptr"][: b + 1].tolist()
        indices, last = bufs["indices"].tolist(), bufs["last"].tolist()
        assert q.shape[0] == qo[b], f"q has {q.shape[0]} rows, the plan {qo[b]}"
        ps, rep = p["page_size"], p["heads"] // p["kv_heads"]
        scale = p["sm_scale"] if p["sm_scale"] is not None else 1 / math.sqrt(p["head_dim"])
        for i in range(b):
            pages = indices[indptr[i]:indptr[i + 1]]
            kv_len = (len(pages) - 1) * ps + last[i] if pages else 0
            n = qo[i + 1] - qo[i]
            if not n:
                continue
            assert kv_len >= n, f"request {i}: {n} query rows over {kv_len} keys"
            keys = k4[pages].reshape(-1, p["kv_heads"], p["head_dim"])[:kv_len].double()
            vals = v4[pages].reshape(-1, p["kv_heads"], p["head_dim"])[:kv_len].double()
            keys, vals = keys.repeat_interleave(rep, 1), vals.repeat_interleave(rep, 1)
            qi = q[qo[i]:qo[i + 1]].double()
            s = torch.einsum("qhd,khd->hqk", qi, keys) * scale
            if p["soft_cap"]:
                s = p["soft_cap"] * torch.tanh(s / p["soft_cap"])
            pos = torch.arange(kv_len - n, kv_len, device=s.device)[:, None]
            k_pos = torch.arange(kv_len, device=s.device)[None, :]
            visible = k_pos <= pos if p["causal"] else torch.ones(n, kv_len, dtype=torch.bool,
                                                                    device=s.device)
            if p["window_left"] >= 0:
                visible &= k_pos >= pos - p["window_left"]
            probs = s.masked_fill(~visible, float("-inf")).softmax(-1)
            out[qo[i]:qo[i + 1]] = torch.einsum("hqk,khd->qhd", probs, vals).to(out.dtype)
