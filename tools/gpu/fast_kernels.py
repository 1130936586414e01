"""The fast decode kernels (``hinge.layers.fast_triton``) against the torch ops they replace, on CUDA.

    python tools/gpu/fast_kernels.py                       # the table (about a minute on an H200)
    python tools/gpu/fast_kernels.py --sweep --m 1         # also try GEMV tilings, best per shape
    python tools/gpu/fast_kernels.py --sweep --m 1 --shapes o down   # a slice of the sweep
    OUT=/tmp/out python tools/gpu/fast_kernels.py          # also $OUT/fast_kernels.json

GEMV rows: the Qwen3-8B linears (fused qkv 6144x4096, o 4096x4096, fused gate|up 24576x4096,
down 4096x12288) in bf16 at M = 1, 4, 16: ``fast_triton.gemv`` with its default tiling against
``torch.matmul`` (cuBLAS). Each weight has enough copies (>= 8, >= 512 MB in all) that every call
reads it from HBM, not L2; one CUDA graph runs one call per copy and is replayed; the time is per
call in microseconds, ``TB/s`` is the weight bytes over that time. ``max diff`` is the largest
difference from cuBLAS's result. Element-wise rows: ``add_rmsnorm`` (hidden 4096) against
``x + r`` then ``F.rms_norm``, and ``silu_mul`` (intermediate 12288) against ``F.silu(a) * b``,
and ``qk_norm_rope`` (32 + 8 heads of 128) against two ``F.rms_norm`` and the rotation
``RotaryEmbedding.apply_qk`` runs, at M = 1 and 64, timed the same way (one graph of 32 calls).

``--sweep`` times a small grid of tilings (rows per program, K step, split-K, warps, tensor cores)
per shape and M, and prints the best ones: what ``gemv.default_config`` should return (about 800
tilings for all of M = 1, 4, 16, several minutes: run one ``--m`` at a time). One failing
shape or tiling is reported and skipped; the rest still run.
"""

from __future__ import annotations

import argparse
import sys
import traceback

import torch
import torch.nn.functional as F
from out_json import save_json  # NOTE: the sibling module (tools/gpu is sys.path[0])

from hinge.layers.fast_triton import add_rmsnorm as fused_norm
from hinge.layers.fast_triton import gemv as g
from hinge.layers.fast_triton import qk_norm_rope as fused_qk
from hinge.layers.fast_triton import silu_mul as fused_act

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
ROWS = (1, 4, 16)
MIN_BYTES = 512 << 20
DT = torch.bfloat16


def graph_time_us(calls, replays: int) -> float:
    """Microseconds per call of ``calls`` (a list of no-argument functions) captured in one graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * len(calls))


def weights(n: int, k: int) -> list[torch.Tensor]:
    copies = max(8, -(-MIN_BYTES // (n * k * 2)))
    return [(torch.randn(n, k, device="cuda") * k ** -0.5).to(DT) for _ in range(copies)]


def gemv_rows(ms, shapes, replays: int) -> list[dict]:
    rows = []
    for name in shapes:
        n, k = SHAPES[name]
        try:
            ws = weights(n, k)
        except Exception as exc:  # noqa: BLE001 (one shape must not stop the rest)
            rows.append(dict(op="gemv", shape=name, error=repr(exc)))
            continue
        for m in ms:
            row = dict(op="gemv", shape=f"{name} {n}x{k}", m=m, config=str(g.default_config(m, n, k, sms())))
            try:
                x = torch.randn(m, k, device="cuda").to(DT)
                row["max diff"] = float((g.gemv(x, ws[0]) - torch.matmul(x, ws[0].T)).abs().max())
                ours = graph_time_us([lambda w=w, x=x: g.gemv(x, w) for w in ws], replays)
                cublas = graph_time_us([lambda w=w, x=x: torch.matmul(x, w.T) for w in ws], replays)
                row.update(triton_us=ours, cublas_us=cublas, triton_tbs=n * k * 2 / ours / 1e6,
                           cublas_tbs=n * k * 2 / cublas / 1e6, speedup=cublas / ours)
            except Exception as exc:  # noqa: BLE001
                row["error"] = repr(exc)
                traceback.print_exc(file=sys.stderr)
            rows.append(row)
        del ws
        torch.cuda.empty_cache()
    return rows


def elementwise_rows(replays: int) -> list[dict]:
    rows = []
    for m in (1, 64):
        try:
            x, r = (torch.randn(m, 4096, device="cuda").to(DT) for _ in range(2))
            w = torch.randn(4096, device="cuda").to(DT)

            def torch_norm(x=x, r=r, w=w):
                s = x + r
                return F.rms_norm(s, (4096,), w, 1e-6), s

            ours = graph_time_us([lambda x=x, r=r, w=w: fused_norm.add_rmsnorm(x, r, w, 1e-6)] * 32, replays)
            ref = graph_time_us([torch_norm] * 32, replays)
            diff = float((fused_norm.add_rmsnorm(x, r, w, 1e-6)[0] - torch_norm()[0]).abs().max())
            rows.append(dict(op="add_rmsnorm", shape="4096", m=m, triton_us=ours, torch_us=ref,
                             speedup=ref / ours, **{"max diff": diff}))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(op="add_rmsnorm", shape="4096", m=m, error=repr(exc)))
        try:
            gu = torch.randn(m, 2 * 12288, device="cuda").to(DT)
            ours = graph_time_us([lambda gu=gu: fused_act.silu_mul(gu)] * 32, replays)
            ref = graph_time_us([lambda gu=gu: F.silu(gu[:, :12288]) * gu[:, 12288:]] * 32, replays)
            diff = float((fused_act.silu_mul(gu) - F.silu(gu[:, :12288]) * gu[:, 12288:]).abs().max())
            rows.append(dict(op="silu_mul", shape="12288", m=m, triton_us=ours, torch_us=ref,
                             speedup=ref / ours, **{"max diff": diff}))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(op="silu_mul", shape="12288", m=m, error=repr(exc)))
        try:
            qkv = torch.randn(m, 6144, device="cuda").to(DT)
            q, k = qkv[:, :4096].view(m, 32, 128), qkv[:, 4096:5120].view(m, 8, 128)
            hw = torch.randn(128, device="cuda").to(DT)
            cos, sin = (torch.rand(m, 1, 128, device="cuda").to(DT) for _ in range(2))

            def torch_qk(q=q, k=k, hw=hw, cos=cos, sin=sin):
                qn, kn = F.rms_norm(q, (128,), hw, 1e-6), F.rms_norm(k, (128,), hw, 1e-6)
                qk = torch.cat([qn, kn], dim=1)
                return torch.addcmul(qk * cos, qk.roll(64, dims=-1), sin)

            def ours_qk(q=q, k=k, hw=hw, cos=cos, sin=sin):
                return fused_qk.qk_norm_rope(q, k, hw, hw, 1e-6, cos, sin)

            ours = graph_time_us([ours_qk] * 32, replays)
            ref = graph_time_us([torch_qk] * 32, replays)
            diff = float((torch.cat(ours_qk(), dim=1) - torch_qk()).abs().max())
            rows.append(dict(op="qk_norm_rope", shape="32+8 heads x 128", m=m, triton_us=ours, torch_us=ref,
                             speedup=ref / ours, **{"max diff": diff}))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(op="qk_norm_rope", shape="32+8 heads x 128", m=m, error=repr(exc)))
    return rows


def sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def sweep_configs(m: int, k: int) -> list[g.GemvConfig]:
    """The grid: element-wise tilings for M <= 4 within a register budget, tensor-core tilings
    for every M (block_n >= 16), split-K 1..8 while each slice keeps >= 2 steps, 4 or 8 warps."""
    block_m = triton_pow2(m)
    tiles = []
    if m <= 4:
        tiles += [(bn, bk, False) for bn, bk in ((4, 512), (8, 256), (8, 512), (16, 256), (16, 512), (8, 1024),
                                                  (32, 256)) if block_m * bn * bk <= 8192]
    tiles += [(bn, bk, True) for bn, bk in ((16, 128), (16, 256), (16, 512), (32, 128), (32, 256), (64, 128))]
    out = []
    for bn, bk, dot in tiles:
        for split in (1, 2, 4, 8):
            if k // (bk * split) < 2:
                continue
            for warps in (4, 8):
                out.append(g.GemvConfig(block_n=bn, block_k=bk, split_k=split, num_warps=warps, dot=dot))
    return out


def triton_pow2(m: int) -> int:
    return 1 << (m - 1).bit_length()


def sweep(ms, shapes, replays: int, top: int) -> list[dict]:
    rows = []
    for name in shapes:
        n, k = SHAPES[name]
        try:
            ws = weights(n, k)
        except Exception as exc:  # noqa: BLE001
            print(f"sweep {name}: {exc!r}", file=sys.stderr)
            continue
        for m in ms:
            x = torch.randn(m, k, device="cuda").to(DT)
            ref = torch.matmul(x, ws[0].T)
            results = []
            for cfg in sweep_configs(m, k):
                try:
                    diff = float((g.gemv(x, ws[0], cfg) - ref).abs().max())
                    us = graph_time_us([lambda w=w, x=x, cfg=cfg: g.gemv(x, w, cfg) for w in ws], replays)
                    results.append((us, cfg, diff))
                except Exception as exc:  # noqa: BLE001
                    print(f"sweep {name} m={m} {cfg}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            results.sort(key=lambda t: t[0])
            default = g.default_config(m, n, k, sms())
            default_us = next((us for us, cfg, _ in results if cfg == default), None)
            for rank, (us, cfg, diff) in enumerate(results[:top]):
                rows.append(dict(op="sweep", shape=f"{name} {n}x{k}", m=m, rank=rank + 1, triton_us=us,
                                 triton_tbs=n * k * 2 / us / 1e6, config=str(cfg), default_us=default_us,
                                 **{"max diff": diff}))
            print(f"sweep {name} m={m}: {len(results)} tilings, best {results[0][0]:.1f} us "
                  f"{results[0][1]}" if results else f"sweep {name} m={m}: nothing ran", file=sys.stderr)
        del ws
        torch.cuda.empty_cache()
    return rows


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
    return "" if v is None else str(v)


def table(rows: list[dict]) -> str:
    cols = []
    for row in rows:
        cols += [c for c in row if c not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(fmt(row.get(c)) for c in cols) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, nargs="+", default=list(ROWS), help="rows (batch) per GEMV")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--replays", type=int, default=20, help="graph replays per timing")
    parser.add_argument("--sweep", action="store_true", help="also time a grid of GEMV tilings")
    parser.add_argument("--top", type=int, default=3, help="best tilings printed per shape and M")
    parser.add_argument("--no-elementwise", action="store_true",
                        help="skip add_rmsnorm / silu_mul / qk_norm_rope")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs CUDA: run on the GPU machine")
    print(f"# {torch.cuda.get_device_name()} ({sms()} SMs), torch {torch.__version__}", flush=True)
    rows = gemv_rows(args.m, args.shapes, args.replays)
    if not args.no_elementwise:
        rows += elementwise_rows(args.replays)
    print(table(rows), flush=True)
    sweep_rows = sweep(args.m, args.shapes, args.replays, args.top) if args.sweep else []
    if sweep_rows:
        print("\n" + table(sweep_rows), flush=True)
    path = save_json("fast_kernels.json",
                     dict(device=torch.cuda.get_device_name(), rows=rows, sweep=sweep_rows))
    if path:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
