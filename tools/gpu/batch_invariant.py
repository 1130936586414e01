"""Deterministic-mode kernels on CUDA: the Triton batch-invariant path against the 16-row-block
path it replaces and the plain (not batch-invariant) torch op, in one run.

    python tools/gpu/batch_invariant.py            # the full table (about a minute on an H200)
    python tools/gpu/batch_invariant.py --quick    # fewer shapes and rows

Times are the median of ``--iters`` CUDA-event timings per call, in microseconds. Ops and shapes
are the Qwen3-8B ones (bf16 linears, hidden 4096, vocabulary 151,936) and Qwen3.5 gated DeltaNet
heads (16 key / 32 value heads of 128). Columns:

- ``triton``: the batch-invariant kernel deterministic mode now runs (``hinge.layers.
  batch_invariant`` on CUDA; for the delta rule ``recurrent_kernels.delta_rule_triton``);
- ``blocks16``: what it ran before (16-row blocks; per-row log-softmax; the per-token torch loop
  of the delta rule, timed only where it finishes in a few seconds);
- ``plain``: the default-mode op (cuBLAS ``F.linear``, ``F.rms_norm``, ``torch.log_softmax``,
  fla's chunked / fused-recurrent delta rule when fla-core is installed, else hinge's torch one);
- ``x plain``: triton time over plain; ``x blocks16``: blocks16 time over triton (speed-up);
- ``same bits``: row 0 computed in the batch equals row 0 computed alone, for triton and plain.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys

import torch
import torch.nn.functional as F

from hinge.layers import batch_invariant

LINEARS = {"qkv 6144x4096": (6144, 4096), "o 4096x4096": (4096, 4096),
           "gate_up 24576x4096": (24576, 4096), "down 4096x12288": (4096, 12288),
           "lm_head 151936x4096": (151936, 4096)}
ROWS = (1, 16, 64, 256, 2048, 8192)
QUICK_ROWS = (1, 64, 2048)


def timed(fn, iters: int) -> float:
    """Median microseconds of one call."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def same_bits(fn, x: torch.Tensor) -> str:
    if x.shape[0] < 2:
        return "-"
    return "yes" if torch.equal(fn(x)[0], fn(x[:1])[0]) else "NO"


def row(table, op, shape, rows, triton_fn, blocks_fn, plain_fn, x, iters, blocks_ok=True):
    t = timed(lambda: triton_fn(x), iters)
    b = timed(lambda: blocks_fn(x), max(3, iters // 4)) if blocks_ok else float("nan")
    p = timed(lambda: plain_fn(x), iters)
    table.append((op, shape, rows, t, b, p, t / p, b / t, same_bits(triton_fn, x),
                  same_bits(plain_fn, x)))


def linear_rows(table, rows, names, iters):
    for name in names:
        n, k = LINEARS[name]
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        for m in rows:
            if n * m > 151936 * 2048:  # the lm_head only ever sees the sampled rows
                continue
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            row(table, "linear", name, m, lambda a, w=w: batch_invariant.linear(a, w),
                lambda a, w=w: batch_invariant.blockwise_linear(a, w),
                lambda a, w=w: F.linear(a, w), x, iters)
        del w


def norm_rows(table, rows, iters):
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    for m in rows:
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        row(table, "rmsnorm", "hidden 4096", m, lambda a: batch_invariant.rmsnorm(a, w, 1e-6),
            lambda a: batch_invariant._blockwise(
                a, lambda blk: batch_invariant.rmsnorm_reference(blk, w, 1e-6)),
            lambda a: F.rms_norm(a, (4096,), w, 1e-6), x, iters)


def softmax_rows(table, rows, iters):
    for m in rows:
        if m > 2048:
            continue
        x = torch.randn(m, 151936, device="cuda") * 4
        row(table, "log_softmax", "vocab 151936", m, batch_invariant.log_softmax,
            lambda a: torch.cat([torch.log_softmax(r, -1)[None] for r in a]),  # the old sampler
            lambda a: torch.log_softmax(a, -1), x, iters)


def delta_rule_rows(table, iters, quick):
    from hinge.layers.recurrent_kernels import TorchRecurrentKernels, get_recurrent_kernels

    deterministic = get_recurrent_kernels("cuda", deterministic=True)
    old = TorchRecurrentKernels(deterministic=True)
    try:
        plain = get_recurrent_kernels("cuda", "fla")
    except ImportError:
        plain = TorchRecurrentKernels()
    cases = [("decode", [1] * b) for b in (1, 16, 64)]
    cases += [("prefill", [n]) for n in ((512,) if quick else (512, 4096, 16384))]
    for phase, lens in cases:
        t, b = sum(lens), len(lens)
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        q, k = (torch.randn(t, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(t, 32, 128, device="cuda", dtype=torch.bfloat16)
        g = F.logsigmoid(torch.randn(t, 32, device="cuda") + 3.0)
        beta = torch.sigmoid(torch.randn(t, 32, device="cuda")).bfloat16()
        s0 = torch.randn(b, 32, 128, 128, device="cuda") * 0.1

        def call(kernels, n=None, q=q, k=k, v=v, g=g, beta=beta, s0=s0, cu=cu):
            if n is not None:  # the first n requests: same-bits check of request 0
                return kernels.gated_delta_rule(q[:n], k[:n], v[:n], g[:n], beta[:n], s0[:n],
                                                cu[: n + 1]).out
            return kernels.gated_delta_rule(q, k, v, g, beta, s0, cu).out

        def bits(kernels, b=b, call=call) -> str:
            if b < 2:
                return "-"
            return "yes" if torch.equal(call(kernels)[0], call(kernels, 1)[0]) else "NO"

        tt = timed(lambda: call(deterministic), iters)
        bb = timed(lambda: call(old), 3) if t <= 512 else float("nan")
        pp = timed(lambda: call(plain), iters)
        table.append(("delta_rule", f"{phase} ({plain.name})", f"{b}x{lens[0]}", tt, bb, pp,
                      tt / pp, bb / tt, bits(deterministic), bits(plain)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes and row counts")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per cell (median)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("hinge: error: tools/gpu/batch_invariant.py needs a CUDA GPU; run it on the GPU host",
              file=sys.stderr)
        raise SystemExit(2)
    torch.manual_seed(0)
    rows = QUICK_ROWS if args.quick else ROWS
    names = ["o 4096x4096", "lm_head 151936x4096"] if args.quick else list(LINEARS)
    table: list[tuple] = []
    linear_rows(table, rows, names, args.iters)
    norm_rows(table, rows, args.iters)
    softmax_rows(table, rows, args.iters)
    delta_rule_rows(table, args.iters, args.quick)
    import triton

    print(f"# {datetime.date.today()} {torch.cuda.get_device_name()} torch {torch.__version__} "
          f"triton {triton.__version__}; microseconds per call (median of {args.iters})")
    head = ("op", "shape", "rows", "triton", "blocks16", "plain", "x plain", "x blocks16",
            "same bits triton", "same bits plain")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for op, shape, m, t, b, p, tp, bt, st, sp in table:
        print(f"| {op} | {shape} | {m} | {t:.1f} | {b:.1f} | {p:.1f} | {tp:.2f} | {bt:.2f} "
              f"| {st} | {sp} |")


if __name__ == "__main__":
    main()
