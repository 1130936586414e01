"""fla-core Triton kernels vs hinge's torch reference for gated DeltaNet, on a CUDA GPU, in bf16.

Run on the GPU host (fla-core installed: `pip install -e .[gpu]` or `pip install fla-core`):

    python tools/gpu/check_hybrid.py

For each case it runs the same packed batch (mixed lengths, random initial states) through both
implementations and prints the relative error (max |fla - torch| / max |torch|) of the outputs
and the final states, and the time of each path. Prefill uses `chunk_gated_delta_rule` over
`cu_seqlens`; decode (one token per request) uses `fused_recurrent_gated_delta_rule`; a last
case chains prefill then 8 decode steps on the states each path produced itself.
"""

from __future__ import annotations

import time

import torch

from hinge.layers.recurrent_kernels import TorchRecurrentKernels
from hinge.layers.recurrent_kernels.fla_kernels import FlaRecurrentKernels

CASES = [  # name, lengths, Hk, Hv, Dk, Dv
    ("prefill qwen3.5-0.8b dims", [1, 17, 64, 65, 300, 1000], 16, 16, 128, 128),
    ("prefill GVA (Hv=2Hk)", [5, 128, 777], 16, 32, 128, 128),
    ("decode 64 requests", [1] * 64, 16, 16, 128, 128),
    ("decode GVA 32 requests", [1] * 32, 16, 32, 128, 128),
]


def make_inputs(lens, hk, hv, dk, dv, seed=0, device="cuda", dtype=torch.bfloat16):
    gen = torch.Generator(device=device).manual_seed(seed)
    t, b = sum(lens), len(lens)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    q, k = rand(t, hk, dk).to(dtype), rand(t, hk, dk).to(dtype)
    v = rand(t, hv, dv).to(dtype)
    g = torch.nn.functional.logsigmoid(rand(t, hv) + 3.0)  # decays in (0, 1), mostly near 1
    beta = torch.sigmoid(rand(t, hv)).to(dtype)
    state = rand(b, hv, dk, dv) * 0.1
    return (q, k, v, g, beta, state), cu


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12)).item()


def timed(fn, repeat=5):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        res = fn()
    torch.cuda.synchronize()
    return res, (time.perf_counter() - start) / repeat * 1e3


def compare(ref_k, fla_k, args, cu):
    ref, ref_ms = timed(lambda: ref_k.gated_delta_rule(*args, cu))
    fla, fla_ms = timed(lambda: fla_k.gated_delta_rule(*args, cu))
    return rel_err(fla.out, ref.out), rel_err(fla.final_state, ref.final_state), ref_ms, fla_ms


def chained(ref_k, fla_k, lens, hk, hv, dk, dv, steps=8):
    args, cu = make_inputs(lens, hk, hv, dk, dv, seed=1)
    ref_state = ref_k.gated_delta_rule(*args, cu).final_state
    fla_state = fla_k.gated_delta_rule(*args, cu).final_state
    worst_out = 0.0
    for s in range(steps):
        step, dcu = make_inputs([1] * len(lens), hk, hv, dk, dv, seed=100 + s)
        r = ref_k.gated_delta_rule(*step[:5], ref_state, dcu)
        f = fla_k.gated_delta_rule(*step[:5], fla_state, dcu)
        worst_out = max(worst_out, rel_err(f.out, r.out))
        ref_state, fla_state = r.final_state, f.final_state
    return worst_out, rel_err(fla_state, ref_state)


def main() -> None:
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    ref_k, fla_k = TorchRecurrentKernels(), FlaRecurrentKernels()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    try:
        import fla

        print(f"fla-core {getattr(fla, '__version__', '?')}")
    except ImportError:
        pass
    header = f"{'case':32} {'tokens':>7} {'out rel':>9} {'state rel':>9} {'torch ms':>9} {'fla ms':>8}"
    print(header)
    print("-" * len(header))
    for name, lens, hk, hv, dk, dv in CASES:
        args, cu = make_inputs(lens, hk, hv, dk, dv)
        out_e, st_e, ref_ms, fla_ms = compare(ref_k, fla_k, args, cu)
        print(f"{name:32} {sum(lens):7d} {out_e:9.2e} {st_e:9.2e} {ref_ms:9.2f} {fla_ms:8.2f}")
    out_e, st_e = chained(ref_k, fla_k, [33, 200, 7, 64], 16, 16, 128, 128)
    print(f"{'prefill + 8 decode steps':32} {'':>7} {out_e:9.2e} {st_e:9.2e} {'':>9} {'':>8}")


if __name__ == "__main__":
    main()
