"""NVFP4 W4A16 GEMM (hinge_nvfp4.triton_gemm) against bf16 cuBLAS and the bytes-moved roofline,
then decode of the Qwen3-8B configuration at batch 1 with nvfp4 against bf16 hinge; one run.

    python tools/gpu/nvfp4_gemm.py [--iters 200] [--skip-e2e] [--sweep]
    python tools/gpu/nvfp4_gemm.py --skip-table --sweep --sweep-m 1 --sweep-layout groups \
        --e2e-layout groups      # the group-layout kernel alone, then end to end with it
        --e2e-kernel mma         # end to end with the tensor-core decode GEMVs
        --e2e-plan - plan.json   # ... with the built-in tilings, then a tuned file's

GEMMs: Qwen3-8B layer shapes (fused q|k|v 6144x4096, gate|up 24576x4096, down 4096x12288, o
4096x4096) at M = 1, 4, 16, 64, 256, default and deterministic tiles. Every timing replays a
CUDA graph that runs the op on ``ROTATE`` copies of the weights in turn, so each call reads its
weights from HBM (the copies together exceed the 50 MB L2). Roofline = (weight bytes + scale
bytes + activation and output bytes) / peak HBM bandwidth (``--hbm-tbs``, 4.8 TB/s on an H200, 3.35 on an H100 by default);
``% roofline`` = roofline time / measured time of the faster default-mode kernel (goal >= 70 %
at M <= 16, default mode). M <= 16 in default mode runs the decode GEMV
(``hinge_nvfp4.triton_gemv``), or with ``kernel: mma`` (the ``mma us`` column) the tensor-core
GEMV (``hinge_nvfp4.mma_gemv``, the tilings shipped for the GPU). ``--sweep`` then
times a few GEMV tilings per shape at M = 1 (CUDA-core) and M = 16 (tensor-core), same timing and
roofline, and prints the best per shape next to ``default_config``'s choice.
End to end: ``hinge bench``-style greedy decode of 128 tokens at batch 1 with ``load_format =
dummy`` weights of the 8B config, quantizer none (bf16) vs nvfp4 (dummy packed weights: the
speed, not the text, is measured): tokens/s over the whole ``generate`` (prefill and first token
included, as the ninth session and before reported), and decoding (``roofline.decode_rate``:
the median decode step, as the roofline benchmark measures batch 1).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import statistics
import sys
import types
from pathlib import Path

import torch

SHAPES = {"qkv 6144x4096": (6144, 4096), "gate_up 24576x4096": (24576, 4096),
          "down 4096x12288": (4096, 12288), "o 4096x4096": (4096, 4096)}
SHAPE_NAMES = [label.split()[0] for label in SHAPES]  #: the names ``--shapes`` takes: qkv, gate_up, down, o
MS = (1, 4, 16, 64, 256)
ROTATE = 8


@contextlib.contextmanager
def cubins_built(options, builds: dict):
    """Within it, ``mma_gemv.cached_cubin`` gives ``mma_gemv.build_cubin``'s builds with the
    options ``options(call)`` returns for each call (``call``: cached_cubin's arguments as
    build_cubin's, defaults filled in), kept in ``builds`` (in memory, never on disk: one build
    a process and set of options): a launcher made inside keeps its build, one made outside gets
    the shipped cubin (nvfp4_trace.py's trace builds, nvfp4_launch_chain.py's diagnostic ones)."""
    from hinge_nvfp4 import mma_gemv

    def cubin(arch, stages=4, cache_dir=None, prefetch=None, pdl=False, warps=mma_gemv.WARPS,
              columns=mma_gemv.COLUMNS, trigger="read", row_scale="end", wg=False):  # (cached_cubin's arguments)
        call = {"arch": arch, "stages": stages, "prefetch": prefetch or 0, "pdl": pdl, "warps": warps,
                "columns": columns, "trigger": trigger, "row_scale": row_scale, "wg": wg}
        call.update(options(call))
        key = tuple(sorted(call.items()))
        if key not in builds:
            builds[key] = mma_gemv.build_cubin(**call)
        return builds[key]

    shipped, mma_gemv.cached_cubin = mma_gemv.cached_cubin, cubin
    try:
        yield
    finally:
        mma_gemv.cached_cubin = shipped


def shapes_of(names: list[str] | None):
    """``SHAPES``'s (label, (N, K)) in order: those whose name (``SHAPE_NAMES``) is in ``names``,
    or all of them where ``names`` is empty or None (a script's ``--shapes``)."""
    return [(label, nk) for label, nk in SHAPES.items() if not names or label.split()[0] in names]


def peak_hbm_tbs() -> float:
    """The GPU's datasheet HBM bandwidth in TB/s, by name: 3.35 on an H100, else the H200's 4.8."""
    return 3.35 if "H100" in torch.cuda.get_device_name() else 4.8


def start(hbm_tbs: float | None, detail: str = "") -> float:
    """A GPU script's start: exits without CUDA, prints the dated line of card and torch (then
    ``detail``, whose ``{hbm}`` is the bandwidth) and returns ``hbm_tbs`` or ``peak_hbm_tbs()``."""
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    hbm_tbs = hbm_tbs or peak_hbm_tbs()
    print(f"{datetime.date.today()} {torch.cuda.get_device_name()} torch {torch.__version__}"
          + detail.format(hbm=hbm_tbs))
    return hbm_tbs


def graph_time(fn, iters: int, replays: int = 0) -> float:
    """Median microseconds per ``fn()`` call, replayed from a CUDA graph of ROTATE calls: events
    around one replay (``replays`` 0: the graph's launch counts in it), or ``replays`` replays
    timed from while one already runs (the kernels alone, the GPU never idle between them)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(ROTATE):
            fn(i)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if replays:
            graph.replay()
        start.record()
        for _ in range(max(replays, 1)):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / (ROTATE * max(replays, 1)))
    return statistics.median(times)


def mma_layers(quant: list, n: int) -> tuple:
    """``kernel: mma``'s kernel object and a layer a weight copy (its repack and tiling), or
    (None, None) where the GPU or toolkit cannot run it."""
    from hinge_nvfp4.kernels import MmaKernel
    from hinge_nvfp4.options import NVFP4Options

    try:
        kernel = MmaKernel(dequant_rows=NVFP4Options().prefill_dequant_rows)  # as the engine builds it
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"(no kernel: mma column: {exc})")
        return None, None
    return kernel, layers_of(kernel, quant, n)


def layers_of(kernel, quant: list, n: int, pairs: bool = False) -> list:
    """A layer a quantized weight copy, prepared by ``kernel`` (``kernel: mma``: its repack and
    tiling), row scales 1 (``pairs``: a fused [gate | up] of two equal halves, as the engine's
    gate_up, which ``kernel: mma`` pairs for its gated GEMV)."""
    layers = []
    for packed, scales, _ in quant:
        layer = torch.nn.Module()
        layer.row_scale = torch.ones(n, device="cuda")
        if pairs:
            layer.spec = types.SimpleNamespace(output_sizes_per_partition=(n // 2, n // 2))
        kernel.prepare_linear(layer, packed, scales)
        layers.append(layer)
    return layers


def gemm_table(iters: int, hbm_tbs: float, ms: tuple = MS) -> None:
    """The table; its ``mma`` column is ``kernel: mma``'s call as the engine makes it (the
    tensor-core GEMV at M <= 16 with the tilings shipped for this GPU, 16 rows a launch below
    ``prefill_dequant_rows``, from there the weight dequantized from the repack, then cuBLAS),
    ``nvfp4`` the Triton GEMM's, ``deq`` the Triton dequantization then cuBLAS (M >= 64),
    ``det`` deterministic mode's; ``% roofline`` of the fastest default-mode one."""
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.triton_gemm import nvfp4_linear, nvfp4_linear_dequantized

    print(f"{'shape':22} {'M':>4} {'bf16 us':>9} {'nvfp4 us':>9} {'mma us':>8} {'deq us':>8} {'det us':>9} "
          f"{'x bf16':>7} {'roofline us':>11} {'% roofline':>10}")
    for label, (n, k) in SHAPES.items():
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
        quant = [fp4.quantize_weight(w) for w in ws]
        row_scale = torch.ones(n, device="cuda")
        kernel, layers = mma_layers(quant, n)
        buffer = torch.empty(2 * n * k, dtype=torch.uint8, device="cuda")
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            bf16 = graph_time(lambda i=0, x=x, ws=ws: torch.nn.functional.linear(x, ws[i]), iters)
            fast = graph_time(lambda i=0, x=x, q=quant, rs=row_scale: nvfp4_linear(x, q[i][0], q[i][1], rs, None),
                              iters)
            det = graph_time(lambda i=0, x=x, q=quant, rs=row_scale: nvfp4_linear(
                x, q[i][0], q[i][1], rs, None, deterministic=True), iters)
            mma = (graph_time(lambda i=0, x=x, ls=layers, kn=kernel: kn.linear(ls[i], x, None, None), iters)
                   if kernel is not None else float("nan"))
            deq = (graph_time(lambda i=0, x=x, q=quant, rs=row_scale, b=buffer: nvfp4_linear_dequantized(
                x, q[i][0], q[i][1], rs, None, b), iters) if m >= 64 else float("nan"))
            moved = n * k // 2 + n * k // 16 + 2 * m * (k + n)
            roof = moved / (hbm_tbs * 1e12) * 1e6
            best = min(t for t in (fast, mma, deq) if t == t)
            print(f"{label:22} {m:>4} {bf16:>9.1f} {fast:>9.1f} {mma:>8.1f} {deq:>8.1f} {det:>9.1f} "
                  f"{bf16 / best:>7.2f} {roof:>11.1f} {100 * roof / best:>9.0f}%")
        del layers


def quick_configs(m: int, n: int, k: int) -> list:
    """``--quick``'s M = 1 tilings (a short device call): the default, longer K steps (more bytes
    in flight a program), the hand prefetch and the group-layout kernel, at 2 and 4 warps."""
    from hinge_nvfp4.triton_gemv import GemvConfig, default_config

    split = default_config(m, n, k).split_k
    configs = []
    for w in (2, 4):
        configs += [GemvConfig(bn, bk, split, w, False) for bn, bk in ((8, 512), (8, 1024), (8, 2048), (16, 1024))]
        configs += [GemvConfig(bn, bk, split, w, False, prefetch=True) for bn, bk in ((8, 512), (8, 1024))]
        configs += [GemvConfig(bn, bk, split, w, False, layout="groups")
                    for bn, bk in ((8, 512), (8, 1024), (4, 1024), (16, 512))]
    return [c for c in configs if c.block_k <= k]


def sweep_configs(m: int, n: int, k: int) -> list:
    """GEMV tilings to try at (m, n, k): block sizes around the default at 2 and 4 warps (4 and 8
    for ``dot``)
    (ncu on the H200: the old M = 1 tiling, 32 rows on 4 warps, had 165 registers a thread, 12
    resident warps per SM, and issued on 47% of cycles), each at splits 1/2x, 1x, 2x of the
    default's. (The W-as-A kernel was the slowest of the sixth session's sweep and is gone.)"""
    from hinge_nvfp4.triton_gemv import GemvConfig, default_config

    base = default_config(m, n, k)
    if base.dot:
        blocks = [(32, 256), (64, 256), (64, 128), (128, 128)]
        warps = (4, 8)
    else:  # longer K steps too: more bytes in flight a program (24 warps a SM hide too little)
        blocks = [(8, 512), (8, 1024), (8, 2048), (16, 512), (16, 1024), (4, 1024)]
        warps = (2, 4)
    configs = []
    for block_n, block_k in blocks:
        steps = -(-k // block_k)
        for split in sorted({max(1, base.split_k // 2), base.split_k, base.split_k * 2}):
            if split <= steps:
                configs += [GemvConfig(block_n, block_k, split, w, base.dot) for w in warps]
    # software-pipeline depth of the default tiling (every other row: 3 stages; the sm_90 PTX has
    # no cp.async at any depth: Triton pipelines none of this loop's loads)
    configs += [GemvConfig(base.block_n, base.block_k, base.split_k, base.num_warps, base.dot, stages)
                for stages in (1, 2, 4, 5)]
    # the one-row kernel in the scale groups' layout (no shared memory in its loop)
    if m == 1:
        for block_n, block_k in [(8, 512), (16, 512), (8, 1024), (4, 512), (4, 1024)]:
            for split in sorted({max(1, base.split_k // 2), base.split_k, base.split_k * 2}):
                configs += [GemvConfig(block_n, block_k, split, w, False, layout="groups")
                            for w in (2, 4)]
    # the hand prefetch (``GemvConfig.prefetch``: each step's loads one step ahead)
    ahead = [(64, 128), (32, 256)] if base.dot else [(8, 512), (8, 1024), (16, 512)]
    for block_n, block_k in ahead:
        if block_k <= k:
            configs += [GemvConfig(block_n, block_k, base.split_k, w, base.dot, prefetch=True)
                        for w in warps]
    return configs


@functools.cache
def registers(m: int, cfg) -> str:
    """``regs/warps-per-SM`` of the tiling at ``m`` rows, from its sm_90 compile at the gate|up
    shape (tools/kernels/sass_loop.py; the other shapes specialize alike)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
    try:
        import sass_loop

        r = sass_loop.nvfp4_gemv(m, config=cfg)
        return f"{r.registers}r/{sass_loop.warps_per_sm(r.registers, cfg.num_warps)}w"
    except Exception as exc:  # noqa: BLE001 - a report column, never the reason a sweep stops
        return f"?({type(exc).__name__})"


def sweep(iters: int, hbm_tbs: float) -> dict:
    """Print the sweep; returns the fastest tiling per swept (m, n, k)."""
    from hinge_nvfp4 import format as fp4
    from hinge_nvfp4.triton_gemv import default_config, nvfp4_gemv

    print("\nsweep: decode GEMV tilings (block_n, block_k, split_k, warps, dot, stages)")
    fastest = {}
    for label, (n, k) in shapes_of(ARGS.shapes):
        quant = [fp4.quantize_weight(torch.randn(n, k, device="cuda", dtype=torch.bfloat16)) for _ in range(ROTATE)]
        row_scale = torch.ones(n, device="cuda")
        for m in ARGS.sweep_m:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            roof = (n * k // 2 + n * k // 16 + 2 * m * (k + n)) / (hbm_tbs * 1e12) * 1e6
            results = []
            for cfg in (quick_configs if ARGS.quick and m == 1 else sweep_configs)(m, n, k):
                if ARGS.sweep_layout != "all" and cfg.layout != ARGS.sweep_layout:
                    continue
                try:
                    us = graph_time(lambda i=0, x=x, q=quant, rs=row_scale, c=cfg: nvfp4_gemv(
                        x, q[i][0], q[i][1], rs, None, config=c), max(20, iters // 4))
                except Exception as exc:  # a tiling that does not compile: report, go on
                    print(f"  {label:22} {m:>4} {cfg}: failed: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                results.append((us, cfg))
                print(f"  {label:22} {m:>4} ({cfg.block_n}, {cfg.block_k}, {cfg.split_k}, {cfg.num_warps}, "
                      f"{cfg.dot}, {cfg.num_stages}{', prefetch' if cfg.prefetch else ''}"
                      f"{', groups' if cfg.layout == 'groups' else ''}) {us:>8.1f} us "
                      f"{100 * roof / us:>5.0f}% {'' if ARGS.quick else registers(m, cfg)}")
            if results:
                us, best = min(results, key=lambda r: r[0])
                fastest[(m, n, k)] = best
                print(f"  best {label} M={m}: {best} {us:.1f} us ({100 * roof / us:.0f}% roofline); "
                      f"default {default_config(m, n, k)}")
    return fastest


def use_configs(layout: str | None = None, fastest: dict | None = None) -> None:
    """Make this process's GEMVs take the sweep's ``fastest`` tiling for each swept (m, n, k),
    and every other M = 1 CUDA-core GEMV ``layout`` (``nvfp4_gemv`` reads the module's
    ``default_config`` at each call)."""
    import dataclasses

    from hinge_nvfp4 import triton_gemv

    chosen = triton_gemv.default_config

    def config(m, n, k, num_sms=132):
        if fastest and (m, n, k) in fastest:
            return fastest[(m, n, k)]
        cfg = chosen(m, n, k, num_sms)
        return dataclasses.replace(cfg, layout=layout) if layout and m == 1 and not cfg.dot else cfg

    triton_gemv.default_config = config
    for (m, n, k), cfg in (fastest or {}).items():
        print(f"  M = {m}, {n}x{k}: {cfg}")
    if layout:
        print(f"  other M = 1 GEMVs in the {layout!r} layout")


#: what a ModelOpt NVFP4 checkpoint's config carries (enough for the plugin to claim it)
NVFP4_CONFIG = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                "ignore": ["lm_head", "model.embed_tokens"]}


def decode_e2e(tokens: int = 128) -> None:
    """Batch-1 greedy decode, bf16 against nvfp4, dummy weights of the Qwen3-8B preset (real
    vocabulary); the nvfp4 side's config carries an NVFP4 ``quantization_config``. ``--model`` /
    ``--model-nvfp4`` replace the preset directories."""
    import tempfile

    from roofline import (  # NOTE: the sibling script (tools/gpu is sys.path[0])
        decode_rate,
        run_engine,
    )

    from hinge import LLM, SamplingParams
    from hinge.bench.presets import preset_config
    from hinge.bench.random_model import write_random_model

    print("\nend to end: Qwen3-8B config, dummy weights, batch 1, greedy decode, graphs as planned")
    with tempfile.TemporaryDirectory() as tmp:
        config = {**preset_config("qwen3", "8b"), "torch_dtype": "bfloat16"}
        paths = {"none": ARGS.model or str(write_random_model(f"{tmp}/bf16", config)),
                 "nvfp4": ARGS.model_nvfp4 or str(write_random_model(
                     f"{tmp}/nvfp4", {**config, "quantization_config": NVFP4_CONFIG}))}
        rates, prefills = {}, {}
        if ARGS.e2e_layout != "default" or FASTEST:
            use_configs(ARGS.e2e_layout if ARGS.e2e_layout != "default" else None, FASTEST)
        runs = [("none", paths["none"], None, "-")] + [
            ("nvfp4" + ("" if plan == "-" else f" plan {Path(plan).name}") + ("" if env == "-" else f" {env}"),
             paths["nvfp4"], plan, env)
            for plan in ARGS.e2e_plan for env in ARGS.e2e_env]
        for quantizer, path, plan, env in runs:
            for name in {pair.split("=")[0] for e in ARGS.e2e_env if e != "-" for pair in e.split(",")}:
                os.environ.pop(name, None)  # the variables of the other runs
            os.environ.update(dict(pair.split("=", 1) for pair in env.split(",")) if env != "-" else {})
            options = {"kernel": ARGS.e2e_kernel} if plan is not None and ARGS.e2e_kernel != "auto" else {}
            if plan is not None:  # kernel: mma's tilings: the built-in plan or a tuned file
                os.environ.pop("HINGE_NVFP4_MMA_PLAN", None)
                if plan != "-":
                    os.environ["HINGE_NVFP4_MMA_PLAN"] = plan
            with LLM(path, device="cuda", dtype="bfloat16", attention=ARGS.attention, quantizer="auto",
                     quantizer_options=options, load_format="dummy", mem_fraction_static=0.5,
                     attention_options=json.loads(ARGS.attention_options)) as llm:
                params = SamplingParams(max_new_tokens=tokens, temperature=0.0, ignore_eos=True,
                                        detokenize=False)
                llm.generate([[1, 2, 3, 4]], params)
                start = datetime.datetime.now()
                llm.generate([[1, 2, 3, 4]], params)
                seconds = (datetime.datetime.now() - start).total_seconds()
                # the decode rate as roofline.py measures it: the median step of the decode
                stamps, counts, wall = run_engine(llm, [[1, 2, 3, 4]], params)
                rates[quantizer] = (tokens / seconds, decode_rate(stamps, counts, 1))
                steps = [b - a for a, b in zip(stamps[:-1], stamps[1:], strict=True)]  # (decode steps)
                slow = [t for t in steps if t > 2 * statistics.median(steps)] if steps else []
                stalls = (f"; the stepped run {tokens / wall:.1f} tokens/s, its "
                          f"slowest step {max(steps) * 1e3:.2f} ms, {len(slow)} steps over twice the median "
                          f"({sum(slow) * 1e3:.1f} ms)") if steps else ""
                if ARGS.e2e_profile:  # where a batch-1 decode step's time goes, kernel by kernel
                    from step_profile import profile_decode, table  # NOTE: the sibling script

                    print(table(profile_decode(llm.engine, [[1, 2, 3, 4]], params), quantizer))
                if ARGS.e2e_prefill:  # time to first token of one long prompt (median of 3)
                    def prompt(r):  # a new first token each run: no prefix-cache hit
                        return [[(7 * i + r) % 1000 + 10 for i in range(ARGS.e2e_prefill)]]

                    first = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False)
                    llm.generate(prompt(0), first)
                    ttft = []
                    for r in range(1, 4):
                        start = datetime.datetime.now()
                        llm.generate(prompt(r), first)
                        ttft.append((datetime.datetime.now() - start).total_seconds() * 1000)
                    prefills[quantizer] = sorted(ttft)[1]
                    print(f"  {quantizer}: prefill of {ARGS.e2e_prefill} tokens {prefills[quantizer]:.1f} ms")
                print(f"  {quantizer}: {rates[quantizer][0]:.1f} tokens/s over the whole generate, "
                      f"{rates[quantizer][1]:.1f} decoding ({llm.engine.plan.describe()[2]}){stalls}")
        for label, rate in rates.items():
            if label != "none":
                print(f"  {label} / bf16: {rate[0] / rates['none'][0]:.2f}x over the whole generate, "
                      f"{rate[1] / rates['none'][1]:.2f}x decoding (goal >= 2x)")
                if label in prefills:
                    print(f"  {label} / bf16: prefill of {ARGS.e2e_prefill} tokens "
                          f"{prefills[label] / prefills['none']:.2f}x the time")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--hbm-tbs", type=float, default=None,
                        help="peak HBM bandwidth (default: 4.8 on an H200, 3.35 on an H100, by name)")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--ms", type=int, nargs="+", default=list(MS),
                        help="the GEMM table's rows of x (prefill sizes too: 1024 8192)")
    parser.add_argument("--sweep", action="store_true", help="also time decode GEMV tilings per shape")
    parser.add_argument("--skip-table", action="store_true", help="no GEMM table (sweep / e2e only)")
    parser.add_argument("--sweep-m", type=int, nargs="+", default=[1, 16], help="sweep these M")
    parser.add_argument("--shapes", nargs="+", choices=SHAPE_NAMES,
                        help="sweep only these shapes")
    parser.add_argument("--quick", action="store_true", help="M = 1: a short list of tilings")
    parser.add_argument("--sweep-layout", choices=("all", "words", "groups"), default="all")
    parser.add_argument("--e2e-layout", choices=("default", "words", "groups"), default="default",
                        help="end to end: every M = 1 GEMV in this layout")
    parser.add_argument("--e2e-prefill", type=int, default=0,
                        help="also time the first token of a prompt of this many tokens (a new prompt each run)")
    parser.add_argument("--e2e-kernel", choices=("auto", "mma", "triton"), default="auto",
                        help="end to end: the nvfp4 quantizer's kernel option (mma: decode GEMVs on "
                        "the tensor cores, hinge_nvfp4.mma_gemv)")
    parser.add_argument("--e2e-plan", nargs="+", default=["-"],
                        help="kernel: mma tilings files (HINGE_NVFP4_MMA_PLAN) to run the nvfp4 "
                             "side with, each its own run; - is the built-in plan")
    parser.add_argument("--e2e-env", nargs="+", default=["-"],
                        help="environments to run the nvfp4 side in, each its own run (NAME=VALUE[,NAME=VALUE]; "
                             "- for none), e.g. HINGE_NVFP4_MMA_TRIGGER=start,HINGE_NVFP4_MMA_L2_AHEAD=1")
    parser.add_argument("--e2e-profile", action="store_true",
                        help="also the kernels of a few decode steps of each run (step_profile.py)")
    parser.add_argument("--e2e-best", action="store_true",
                        help="end to end: each swept shape with its fastest swept tiling")
    parser.add_argument("--attention", default="auto",
                        help="end to end: the attention backend of both sides (auto: flashinfer on CUDA)")
    parser.add_argument("--attention-options", default="{}",
                        help="end to end: attention_options JSON for both sides")
    parser.add_argument("--model", help="a Qwen3-8B config dir (config.json, tokenizer) for the bf16 side")
    parser.add_argument("--model-nvfp4", help="the same with an NVFP4 quantization_config (nvfp4 side)")
    ARGS = parser.parse_args()
    ARGS.hbm_tbs = start(ARGS.hbm_tbs)
    print(f"roofline at {ARGS.hbm_tbs} TB/s")
    if not ARGS.skip_table:
        gemm_table(ARGS.iters, ARGS.hbm_tbs, tuple(ARGS.ms))
    FASTEST = sweep(ARGS.iters, ARGS.hbm_tbs) if ARGS.sweep else {}
    FASTEST = FASTEST if ARGS.e2e_best else {}
    if not ARGS.skip_e2e:
        decode_e2e()
