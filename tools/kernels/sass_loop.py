"""A Triton kernel's main loop in sm_90 machine code, compiled on a machine without a GPU.

Triton's CUDA backend carries ptxas and nvdisasm, so a kernel compiles for the H200 here. This
prints what decides an instruction-bound kernel's speed before any device time is spent:
registers and spills (ptxas), and the instruction mix of the longest loop (the block from a
label to the backward branch that returns to it), per thread per iteration and per element the
iteration handles. Shared-memory traffic (``STS``/``LDS``/``LDSM``/``BAR``) in the loop means a
layout conversion or a dot operand staged through shared memory.

    python tools/kernels/sass_loop.py nvfp4-gemv --m 1       # hinge_nvfp4's decode GEMV at M = 1
    python tools/kernels/sass_loop.py nvfp4-gemv --m 16
    python tools/kernels/sass_loop.py bf16-gemv --m 1        # hinge.layers.fast_triton.gemv

Static counts are a lead, not a timing: on the H200 a Hopper SM issues at most 4 warp
instructions per clock, so ``instructions per element x elements / (132 x 128 x clock)`` is a
floor for an instruction-bound loop (docs/nvfp4.md uses it).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOPPER = 90


@dataclass
class LoopReport:
    name: str
    registers: int
    spill_bytes: int
    loop_instructions: int
    elements: int  #: elements one iteration of the loop handles (over all threads)
    threads: int
    ops: collections.Counter

    @property
    def per_element(self) -> float:
        return self.loop_instructions * self.threads / self.elements

    def line(self) -> str:
        shared = {op: n for op, n in self.ops.items() if op in ("STS", "LDS", "LDSM", "BAR", "SHFL")}
        top = " ".join(f"{op}:{n}" for op, n in self.ops.most_common(10))
        return (f"{self.name}: {self.registers} registers, {self.spill_bytes} B spilled, loop "
                f"{self.loop_instructions} instructions per thread = {self.per_element:.2f} per "
                f"element; shared/shuffle {shared or '-'}\n    {top}")


def compile_for_hopper(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], *,
                       divisible: tuple[str, ...] | None = None, num_warps: int = 4,
                       num_stages: int = 3) -> Any:
    """``triton.compile`` of ``fn`` for sm_90 (no GPU needed), specialized as a launch would be:
    the arguments in ``divisible`` (default: every pointer) are known multiples of 16 (an
    aligned pointer, an int like 4096). Without that a launch's vector loads do not show."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    divisible = divisible if divisible is not None else tuple(
        n for n, t in signature.items() if t.startswith("*"))
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    sig = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", HOPPER, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def launch_divisible(signature: dict[str, str], values: dict[str, int]) -> tuple[str, ...]:
    """What a launch specializes as multiples of 16: every pointer (aligned tensors), and the
    int arguments whose ``values`` are."""
    return tuple(n for n, t in signature.items() if t.startswith("*")) + tuple(
        n for n, v in values.items() if v % 16 == 0)


def ptxas_usage(kernel: Any) -> tuple[int, int]:
    """(registers, spill-store bytes) from ``ptxas -v`` on the kernel's PTX."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(kernel.asm["ptx"])
        report = subprocess.run([get_ptxas(HOPPER).path, "-v", "--gpu-name", f"sm_{HOPPER}a", str(ptx),
                                 "-o", str(Path(tmp) / "kernel.cubin")],
                                capture_output=True, text=True, check=True).stderr
    regs = [int(n) for n in re.findall(r"Used (\d+) registers", report)]
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", report)]
    return max(regs, default=0), sum(spills)


def loop_ops(sass: str) -> collections.Counter:
    """Opcodes (predicates and modifiers dropped) of the longest backward-branch loop."""
    lines = sass.splitlines()
    labels = {line.rstrip(":"): i for i, line in enumerate(lines) if re.match(r"^\.?L\w+:", line)}
    best: tuple[int, int] | None = None
    for i, line in enumerate(lines):
        m = re.search(r"BRA `?\(?(\.?L\w+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            span = (labels[m.group(1)], i)
            if best is None or span[1] - span[0] > best[1] - best[0]:
                best = span
    ops: collections.Counter = collections.Counter()
    if best is None:
        return ops
    for line in lines[best[0]:best[1] + 1]:
        parts = line.split("\t")
        if len(parts) < 2 or not parts[1].strip():
            continue
        words = parts[1].split()
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        ops[op.split(".")[0]] += 1
    return ops


def report(name: str, kernel: Any, *, elements: int, num_warps: int) -> LoopReport:
    from triton.tools.disasm import get_sass

    regs, spill = ptxas_usage(kernel)
    ops = loop_ops(get_sass(kernel.asm["cubin"]))
    return LoopReport(name, regs, spill, sum(ops.values()), elements, 32 * num_warps, ops)


# -- presets ----------------------------------------------------------------------------------


def nvfp4_gemv(m: int, n: int = 24576, k: int = 4096, config: Any = None) -> LoopReport:
    """hinge_nvfp4's decode GEMV at (m, n, k) (default: Qwen3-8B's fused gate|up) with ``config``
    (default: ``default_config``'s), compiled as its launch would be."""
    from hinge_nvfp4.triton_gemv import _nvfp4_gemv_kernel, default_config

    cfg = config or default_config(m, n, k)
    if cfg.layout == "groups" and m == 1 and not cfg.dot:
        return nvfp4_gemv_groups(n, k, cfg)
    block_m = 16 if cfg.dot else 1 << (m - 1).bit_length()
    sig = dict(x_ptr="*bf16", w_ptr="*i32", s_ptr="*u8", rs_ptr="*fp32", bias_ptr="*fp32",
               out_ptr="*bf16", M="i32", N="i32", K="i32", stride_xm="i32", stride_wn="i32",
               stride_sn="i32", stride_os="i32", stride_om="i32", k_per_split="i32")
    consts = dict(HAS_BIAS=False, EPILOGUE=cfg.split_k == 1, IEEE=False, EVEN_K=True,
                  USE_DOT=cfg.dot, BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                  PREFETCH=cfg.prefetch)
    ints = dict(M=m, N=n, K=k, stride_xm=k, stride_wn=k // 8, stride_sn=k // 16, stride_os=0,
                stride_om=n, k_per_split=k // cfg.split_k)
    kernel = compile_for_hopper(_nvfp4_gemv_kernel, sig, consts, divisible=launch_divisible(sig, ints),
                                num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return report(f"nvfp4 gemv M={m} {cfg}", kernel, elements=cfg.block_n * cfg.block_k,
                  num_warps=cfg.num_warps)


def nvfp4_gemv_groups(n: int, k: int, cfg: Any) -> LoopReport:
    """hinge_nvfp4's one-row GEMV in the scale groups' layout (``GemvConfig(layout="groups")``)."""
    from hinge_nvfp4.triton_gemv_groups import _nvfp4_gemv_groups_kernel

    sig = dict(x_ptr="*bf16", g_ptr="*i64", s_ptr="*u8", rs_ptr="*fp32", bias_ptr="*fp32",
               out_ptr="*bf16", N="i32", K="i32", stride_gn="i32", stride_sn="i32",
               stride_os="i32", k_per_split="i32")
    consts = dict(HAS_BIAS=False, EPILOGUE=cfg.split_k == 1, EVEN_K=True, BLOCK_N=cfg.block_n,
                  BLOCK_K=cfg.block_k)
    ints = dict(N=n, K=k, stride_gn=k // 16, stride_sn=k // 16, stride_os=0,
                k_per_split=k // cfg.split_k)
    kernel = compile_for_hopper(_nvfp4_gemv_groups_kernel, sig, consts,
                                divisible=launch_divisible(sig, ints), num_warps=cfg.num_warps,
                                num_stages=cfg.num_stages)
    return report(f"nvfp4 gemv (groups) M=1 {cfg}", kernel, elements=cfg.block_n * cfg.block_k,
                  num_warps=cfg.num_warps)


def warps_per_sm(registers: int, num_warps: int) -> int:
    """Resident warps per Hopper SM that the register file allows a kernel of ``registers`` per
    thread in blocks of ``num_warps`` (64 K registers, allocated per warp in units of 256, at
    most 32 blocks and 64 warps)."""
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    blocks = min(32, 65536 // (per_warp * num_warps), 64 // num_warps)
    return blocks * num_warps


def bf16_gemv(m: int) -> LoopReport:
    from hinge.layers.fast_triton.gemv import _gemv_kernel, default_config

    cfg = default_config(m, 24576, 4096)
    block_m = 16 if cfg.dot else 1 << (m - 1).bit_length()
    sig = dict(x_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", M="i32", N="i32", K="i32",
               stride_xm="i32", stride_os="i32", stride_om="i32", k_per_split="i32")
    consts = dict(BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, USE_DOT=cfg.dot,
                  EVEN_K=True)
    n, k = 24576, 4096
    ints = dict(M=m, N=n, K=k, stride_xm=k, stride_os=0, stride_om=n, k_per_split=k)
    kernel = compile_for_hopper(_gemv_kernel, sig, consts, divisible=launch_divisible(sig, ints),
                                num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return report(f"bf16 gemv M={m} {cfg}", kernel, elements=cfg.block_n * cfg.block_k,
                  num_warps=cfg.num_warps)


PRESETS = {"nvfp4-gemv": nvfp4_gemv, "bf16-gemv": bf16_gemv}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("preset", choices=list(PRESETS))
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16], help="rows (batch) per call")
    args = ap.parse_args()
    for m in args.m:
        r = PRESETS[args.preset](m)
        print(r.line(), f"\n    {warps_per_sm(r.registers, r.threads // 32)} warps per SM by registers")


if __name__ == "__main__":
    main()
