"""Paged attention in Triton with a fixed KV split at absolute key positions (batch invariant).

One query *tile* is ``TPT`` tokens of one request times the ``GROUP`` query heads that share one
KV head (rows ``token * G_P2 + head``, ``BLOCK_M = TPT * G_P2`` rows). Keys are cut into splits
of ``SPLIT`` keys at absolute positions (``[s * SPLIT, (s + 1) * SPLIT)``) and each split into
blocks of ``BLOCK_N`` keys, also at absolute positions. A split's softmax state ``(m, l, acc)``
always starts fresh; splits are then folded in ascending order with one formula (``_fold``).

Two ways to run the same arithmetic:

- **fold** (``FOLD=True``): one program per (tile, KV head) walks the tile's splits in order and
  folds each split's state in registers (prefill, extend, mixed batches);
- **split** (``FOLD=False``) + ``_combine``: programs compute split states in parallel and store
  them in float32; the combine kernel folds them in the same order with the same ``_fold``
  (decode and verify: few query rows, long contexts).

A row's bits depend only on its own query, its position and its keys: a block or a split that
a row cannot see leaves its state bit-identical (``exp2(-inf) = 0`` and ``x * 1 + 0 = x``), so
the other rows of its tile, the batch, the prefill chunking and the choice between fold and split
change nothing. The kernels are launched with ``enable_fp_fusion=False`` so the compiler cannot
contract a multiply and an add differently in the two kernels. Every launch uses one tile
configuration per layer shape (``tile_config``), never one chosen by batch size.

Rows of request ``b`` are ``cu_q[b] : cu_q[b + 1]`` of ``q``; its query ``t`` sits at absolute
position ``kv_lens[b] - q_len + t`` and sees keys ``0..pos`` (limited by the sliding window),
read through ``page_table[b]`` (slot ``page * PAGE_SIZE + offset``). A request with
``kv_lens[b] = 0`` reads nothing and writes zeros (padded graph rows).
"""

from __future__ import annotations

import triton
import triton.language as tl

# ---------------------------------------------------------------------------------------------
# device helpers
# ---------------------------------------------------------------------------------------------
# NOTE: only core builtins and jit functions of this module are called. ``tl.sum``, ``tl.max``,
# ``tl.cumsum`` and ``tl.zeros`` are themselves ``@triton.jit`` functions of triton's standard
# library, decorated once when triton is imported, so they stay compiled in a process that
# imported triton before asking for the interpreter (the CPU tests). ``_sum``/``_max``/``_cumsum``
# are the same reductions through the builtins ``tl.reduce``/``tl.associative_scan`` with the
# standard library's own combine functions, which the interpreter recognises and runs in numpy
# (any other combine function it runs element by element in Python: minutes per test).


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _greater(a, b):
    return tl.maximum(a, b)


_ADD = getattr(tl.standard, "_sum_combine", _add)
_MAX = getattr(tl.standard, "_elementwise_max", _greater)


@triton.jit
def _sum(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _ADD)


@triton.jit
def _max(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _MAX)


@triton.jit
def _cumsum(x):
    return tl.associative_scan(x, 0, _ADD)


@triton.jit
def _find_tile(tile, cu_q_ptr, num_requests, TPT: tl.constexpr, R_P2: tl.constexpr):
    """Request of q tile ``tile`` (tiles numbered request by request), its first token, its
    first q row and its q length. The request index is ``>= num_requests`` past the last tile."""
    offs = tl.arange(0, R_P2)
    ok = offs < num_requests
    lo = tl.load(cu_q_ptr + offs, mask=ok, other=0)
    hi = tl.load(cu_q_ptr + offs + 1, mask=ok, other=0)
    n_tiles = (hi - lo + TPT - 1) // TPT
    ends = _cumsum(n_tiles)
    b = _sum((ends <= tile).to(tl.int32), 0)
    mine = offs == b
    first_tile = _sum(tl.where(mine, ends - n_tiles, 0), 0)
    q_lo = _sum(tl.where(mine, lo, 0), 0)
    q_len = _sum(tl.where(mine, hi - lo, 0), 0)
    return b, (tile - first_tile) * TPT, q_lo, q_len


@triton.jit
def _tile_span(tok0, q_len, kv_len, window, TPT: tl.constexpr, SPLIT: tl.constexpr,
               HAS_WINDOW: tl.constexpr):
    """First visible key of the tile, one past its last key, and its splits ``[s_lo, s_hi)``."""
    p_lo = kv_len - q_len + tok0
    p_hi = kv_len - q_len + tl.minimum(tok0 + TPT, q_len) - 1
    n_hi = tl.maximum(p_hi + 1, 0)
    k_first = p_lo * 0
    if HAS_WINDOW:
        k_first = tl.maximum(p_lo - window + 1, 0)
    s_lo = k_first // SPLIT
    s_hi = (n_hi + SPLIT - 1) // SPLIT
    return k_first, n_hi, s_lo, s_hi


@triton.jit
def _rescale(m_old, m_new):
    """``2 ** (m_old - m_new)``, exactly 1 when the maximum did not move: a block or split a row
    cannot see then leaves its state bit-identical whatever ``exp2``'s rounding."""
    return tl.where(m_old == m_new, 1.0, tl.exp2(m_old - m_new))


@triton.jit
def _split_state(q, pos, row_ok, req, kvh, s, k_first, n_hi, kv_len, K, V, PageTable,
                 stride_kt, stride_kh, stride_vt, stride_vh, stride_pt, qk_scale, window,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                 D_P2: tl.constexpr, PAGE_SIZE: tl.constexpr, SPLIT: tl.constexpr,
                 HAS_WINDOW: tl.constexpr, PREC: tl.constexpr):
    """Online-softmax state of split ``s`` alone, from a fresh start: ``(m, l, acc)``, scores in
    log2 units (``qk_scale`` includes ``log2(e)``)."""
    offs_d = tl.arange(0, D_P2)
    d_ok = offs_d < HEAD_DIM
    offs_n = tl.arange(0, BLOCK_N)
    lo = tl.maximum(s * SPLIT, (k_first // BLOCK_N) * BLOCK_N)
    hi = tl.minimum((s + 1) * SPLIT, n_hi)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_sum = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, D_P2], 0.0, tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        kpos = n0 + offs_n
        kv_ok = kpos < kv_len
        page = tl.load(PageTable + req * stride_pt + kpos // PAGE_SIZE, mask=kv_ok, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + (kpos % PAGE_SIZE)
        ld = kv_ok[None, :] & d_ok[:, None]
        k_t = tl.load(K + slot[None, :] * stride_kt + kvh * stride_kh + offs_d[:, None], mask=ld, other=0.0)
        k_t = k_t.to(q.dtype)  # the KV pool may be stored in another dtype than q
        scores = tl.dot(q, k_t, input_precision=PREC) * qk_scale
        visible = (kpos[None, :] <= pos[:, None]) & row_ok[:, None]
        if HAS_WINDOW:
            visible = visible & (kpos[None, :] > pos[:, None] - window)
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m, _max(scores, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(scores - m_safe[:, None])
        alpha = _rescale(m, m_safe)
        l_sum = l_sum * alpha + _sum(p, 1)
        v = tl.load(V + slot[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :],
                    mask=kv_ok[:, None] & d_ok[None, :], other=0.0)
        v = v.to(q.dtype)
        acc = tl.dot(p.to(q.dtype), v, acc=acc * alpha[:, None], input_precision=PREC)
        m = m_new
    return m, l_sum, acc


@triton.jit
def _fold(m_run, l_run, o_run, m_s, l_s, acc_s):
    """Merge one split's state into the running state (splits in ascending order)."""
    m_new = tl.maximum(m_run, m_s)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    a = _rescale(m_run, m_safe)
    c = _rescale(m_s, m_safe)
    l_new = l_run * a + l_s * c
    o_new = o_run * a[:, None] + acc_s * c[:, None]
    return m_new, l_new, o_new


@triton.jit
def _rows(tok0, q_lo, q_len, kv_len, kvh, num_rows, BLOCK_M: tl.constexpr, G_P2: tl.constexpr,
          GROUP: tl.constexpr):
    """Per tile row: token within the request, query head, whether it is a live row, position."""
    rows = tl.arange(0, BLOCK_M)
    tok = tok0 + rows // G_P2
    hq = rows % G_P2
    row_ok = (tok < q_len) & (hq < GROUP) & (q_lo + tok < num_rows)
    pos = kv_len - q_len + tok
    head = kvh * GROUP + hq
    return tok, head, row_ok, pos


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------


# NOTE: stride_pt (the page table's width) too: start-up warm-up launches with a one-page table,
# requests with the builder's; a value specialisation would compile again on the first request
@triton.jit(do_not_specialize=["num_requests", "num_rows", "num_split_programs", "window",
                               "stride_pt"])
def attention_kernel(
    Q, K, V, Out, PartO, PartML, CuQ, KvLens, PageTable,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_pt, stride_pot, stride_poh, stride_pos, stride_pmt, stride_pmh, stride_pms,
    num_requests, num_rows, num_split_programs, qk_scale, window,
    PAGE_SIZE: tl.constexpr, GROUP: tl.constexpr, G_P2: tl.constexpr, TPT: tl.constexpr,
    HEAD_DIM: tl.constexpr, D_P2: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
    R_P2: tl.constexpr, FOLD: tl.constexpr, HAS_WINDOW: tl.constexpr, UPCAST: tl.constexpr,
    PREC: tl.constexpr,
):
    """Grid ``(tiles, kv_heads, split programs)``; ``FOLD`` writes ``Out``, else split partials."""
    BLOCK_M: tl.constexpr = TPT * G_P2
    req, tok0, q_lo, q_len = _find_tile(tl.program_id(0), CuQ, num_requests, TPT, R_P2)
    if req >= num_requests:
        return
    kvh = tl.program_id(1)
    kv_len = tl.load(KvLens + req)
    tok, head, row_ok, pos = _rows(tok0, q_lo, q_len, kv_len, kvh, num_rows, BLOCK_M, G_P2, GROUP)
    k_first, n_hi, s_lo, s_hi = _tile_span(tok0, q_len, kv_len, window, TPT, SPLIT, HAS_WINDOW)
    offs_d = tl.arange(0, D_P2)
    d_ok = offs_d < HEAD_DIM
    io_ok = row_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + (q_lo + tok)[:, None].to(tl.int64) * stride_qt + head[:, None] * stride_qh
                + offs_d[None, :], mask=io_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    if FOLD:
        m_run = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_run = tl.full([BLOCK_M], 0.0, tl.float32)
        o_run = tl.full([BLOCK_M, D_P2], 0.0, tl.float32)
        for s in range(s_lo, s_hi):
            m_s, l_s, acc_s = _split_state(
                q, pos, row_ok, req, kvh, s, k_first, n_hi, kv_len, K, V, PageTable,
                stride_kt, stride_kh, stride_vt, stride_vh, stride_pt, qk_scale, window,
                BLOCK_M, BLOCK_N, HEAD_DIM, D_P2, PAGE_SIZE, SPLIT, HAS_WINDOW, PREC)
            m_run, l_run, o_run = _fold(m_run, l_run, o_run, m_s, l_s, acc_s)
        out = o_run / tl.where(l_run == 0.0, 1.0, l_run)[:, None]
        tl.store(Out + (q_lo + tok)[:, None].to(tl.int64) * stride_ot + head[:, None] * stride_oh
                 + offs_d[None, :], out.to(Out.dtype.element_ty), mask=io_ok)
    else:
        row_t = (q_lo + tok).to(tl.int64)
        for s in range(s_lo + tl.program_id(2), s_hi, num_split_programs):
            m_s, l_s, acc_s = _split_state(
                q, pos, row_ok, req, kvh, s, k_first, n_hi, kv_len, K, V, PageTable,
                stride_kt, stride_kh, stride_vt, stride_vh, stride_pt, qk_scale, window,
                BLOCK_M, BLOCK_N, HEAD_DIM, D_P2, PAGE_SIZE, SPLIT, HAS_WINDOW, PREC)
            tl.store(PartO + row_t[:, None] * stride_pot + head[:, None] * stride_poh + s * stride_pos
                     + offs_d[None, :], acc_s, mask=io_ok)
            ml = PartML + row_t * stride_pmt + head * stride_pmh + s * stride_pms
            tl.store(ml, m_s, mask=row_ok)
            tl.store(ml + 1, l_s, mask=row_ok)


@triton.jit(do_not_specialize=["num_requests", "num_rows", "window"])
def combine_kernel(
    Out, PartO, PartML, CuQ, KvLens,
    stride_ot, stride_oh, stride_pot, stride_poh, stride_pos, stride_pmt, stride_pmh, stride_pms,
    num_requests, num_rows, window,
    GROUP: tl.constexpr, G_P2: tl.constexpr, TPT: tl.constexpr, HEAD_DIM: tl.constexpr,
    D_P2: tl.constexpr, SPLIT: tl.constexpr, R_P2: tl.constexpr, HAS_WINDOW: tl.constexpr,
):
    """Grid ``(tiles, kv_heads)``: fold the split partials of each row in ascending order."""
    BLOCK_M: tl.constexpr = TPT * G_P2
    req, tok0, q_lo, q_len = _find_tile(tl.program_id(0), CuQ, num_requests, TPT, R_P2)
    if req >= num_requests:
        return
    kvh = tl.program_id(1)
    kv_len = tl.load(KvLens + req)
    tok, head, row_ok, pos = _rows(tok0, q_lo, q_len, kv_len, kvh, num_rows, BLOCK_M, G_P2, GROUP)
    k_first, n_hi, s_lo, s_hi = _tile_span(tok0, q_len, kv_len, window, TPT, SPLIT, HAS_WINDOW)
    offs_d = tl.arange(0, D_P2)
    io_ok = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    row_t = (q_lo + tok).to(tl.int64)
    m_run = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_run = tl.full([BLOCK_M], 0.0, tl.float32)
    o_run = tl.full([BLOCK_M, D_P2], 0.0, tl.float32)
    for s in range(s_lo, s_hi):
        ml = PartML + row_t * stride_pmt + head * stride_pmh + s * stride_pms
        m_s = tl.load(ml, mask=row_ok, other=float("-inf"))
        l_s = tl.load(ml + 1, mask=row_ok, other=0.0)
        acc_s = tl.load(PartO + row_t[:, None] * stride_pot + head[:, None] * stride_poh
                        + s * stride_pos + offs_d[None, :], mask=io_ok, other=0.0)
        m_run, l_run, o_run = _fold(m_run, l_run, o_run, m_s, l_s, acc_s)
    out = o_run / tl.where(l_run == 0.0, 1.0, l_run)[:, None]
    tl.store(Out + row_t[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
             out.to(Out.dtype.element_ty), mask=io_ok)
