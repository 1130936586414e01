"""Execution paths, chosen once per quantizer by capability and device (``select_kernel``):

    torch       dequantize + matmul (``hinge_nvfp4.reference``): any device, exact semantics
    triton      Hopper (and any CUDA GPU): fused dequant GEMM, FP4 weights read once and
                dequantized in registers, bf16/fp16 activations (``triton_gemm``); experts through
                the grouped kernel (``triton_moe``)
    flashinfer  Blackwell (compute capability >= 10.0) with w4a4: native FP4 GEMM ``mm_fp4`` over
                swizzled scales (``blackwell``); never on sm_90, where flashinfer's FP4 GEMM and
                quantize are not built. UNTESTED: no Blackwell GPU was available.
    mma         Hopper, w4a16, bf16, default mode (``auto`` there, when nvcc builds it): decode
                GEMVs of at most 16 bf16 rows on the tensor cores (``mma_gemv``: CUDA, nvcc at
                start-up), up to ``prefill_dequant_rows`` in 16-row launches, prefill sizes
                through the weight dequantized from the same repack and cuBLAS; the
                checkpoint's codes are freed (no second copy); experts as triton

Every path takes static shapes and does no host sync in ``linear`` / ``moe`` (CUDA-graph safe).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import torch

from hinge_nvfp4 import reference
from hinge_nvfp4.moe import experts_cpu

if TYPE_CHECKING:
    from torch import nn

    from hinge_nvfp4.options import NVFP4Options

BLACKWELL = (10, 0)
HOPPER = (9, 0)  #: where ``auto`` picks ``mma`` (the only compute capability it was measured on)

logger = logging.getLogger(__name__)


def select_kernel(options: NVFP4Options, device: str, deterministic: bool,
                  dtype: torch.dtype | None = None) -> Any:
    """The kernel object for ``options.kernel`` (``auto``: by device, compute capability and
    the model's ``dtype``; None: not known, never ``mma``)."""
    name = options.kernel
    if name == "auto":
        name = "torch"
        if device == "cuda":
            name = "triton"
            if options.activations == "w4a4" and not deterministic and blackwell_fp4_available():
                name = "flashinfer"
            elif (options.activations == "w4a16" and not deterministic and dtype == torch.bfloat16
                  and torch.cuda.get_device_capability() == HOPPER):
                try:
                    return MmaKernel(dequant_rows=options.prefill_dequant_rows)
                except (OSError, RuntimeError, ValueError) as error:  # no nvcc, a failed build or load
                    logger.warning("nvfp4: the tensor-core GEMV (kernel=mma) could not be built, "
                                   "running kernel=triton: %s", error)
    if name == "torch":
        return TorchKernel(deterministic)
    if device != "cuda":
        raise ValueError(f"nvfp4 kernel {name!r} runs on CUDA only; use kernel=torch (or auto) on {device}")
    if name == "triton":
        return TritonKernel(deterministic, options.prefill_dequant_rows)
    if name == "mma":
        if deterministic:
            raise ValueError("nvfp4 kernel 'mma' is for default mode (its GEMVs of <= 16 rows and "
                             "the Triton kernels of more round differently: not batch invariant); "
                             "deterministic mode runs kernel=triton (or auto)")
        if options.activations != "w4a16":
            raise ValueError("nvfp4 kernel 'mma' computes W4A16; use kernel=triton for w4a4 emulation")
        if dtype is not None and dtype != torch.bfloat16:
            raise ValueError(f"nvfp4 kernel 'mma' computes with bf16 activations and this model runs "
                             f"{str(dtype).removeprefix('torch.')}; use dtype bfloat16 or kernel=triton")
        return MmaKernel(dequant_rows=options.prefill_dequant_rows)
    if not blackwell_fp4_available():
        raise ValueError("nvfp4 kernel 'flashinfer' needs a Blackwell GPU (compute capability >= "
                         "10.0) and flashinfer installed; Hopper runs kernel=triton")
    if options.activations != "w4a4":
        raise ValueError("nvfp4 kernel 'flashinfer' computes W4A4 (FP4 activations); set "
                         "quantizer_options activations=w4a4 or use kernel=triton")
    from hinge_nvfp4.blackwell import FlashInferKernel

    return FlashInferKernel(deterministic)


def blackwell_fp4_available() -> bool:
    """A GPU of compute capability >= 10.0 and an importable flashinfer (never true on sm_90)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < BLACKWELL:
        return False
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


def moe_weights(layer: nn.Module, names: dict[str, str], prefix: str, w4a4: bool) -> tuple:
    """(packed, block scales, row scales, activation scale or None) of ``w13`` or ``w2``."""
    return (getattr(layer, prefix + names["weight"]), getattr(layer, prefix + names["weight_scale"]),
            getattr(layer, f"{prefix}row_scale"), getattr(layer, f"{prefix}act_scale") if w4a4 else None)


class TorchKernel:
    """The reference: dequantize, then matmul (float32 sums)."""

    name = "torch"

    def __init__(self, deterministic: bool) -> None:
        self.deterministic = deterministic

    def prepare_linear(self, layer: nn.Module, packed: torch.Tensor, scales: torch.Tensor) -> bool:
        """Keeps (or converts) the layer's weight; True when the kernel no longer reads ``packed``
        and ``scales`` (the caller may free them)."""
        layer.nvfp4_packed, layer.nvfp4_scales = packed, scales
        return False

    def linear(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
               act_scale: torch.Tensor | None) -> torch.Tensor:
        return reference.linear(x, layer.nvfp4_packed, layer.nvfp4_scales, layer.row_scale, bias,
                                input_scale=act_scale, deterministic=self.deterministic)

    def prepare_moe(self, layer: nn.Module, names: dict[str, str]) -> None:
        return None

    def moe(self, layer: nn.Module, names: dict[str, str], x: torch.Tensor, topk_ids: torch.Tensor,
            topk_weights: torch.Tensor, *, w4a4: bool) -> torch.Tensor:
        return experts_cpu(x, moe_weights(layer, names, "w13_", w4a4), moe_weights(layer, names, "w2_", w4a4),
                           topk_ids, topk_weights, activation=layer.spec.activation, w4a4=w4a4,
                           deterministic=self.deterministic)


class TritonKernel(TorchKernel):
    """The fused dequant GEMM (``triton_gemm``) and grouped experts (``triton_moe``): FP4 weights,
    activations in the compute dtype (w4a4: quantized first, then fed as ``e2m1 * sx``, exact
    in bf16). CUDA tensors; under ``TRITON_INTERPRET=1`` CPU tensors too (tests). ``dequant_rows``
    (> 0, default mode, w4a16, bf16/fp16 x): x of at least that many rows takes
    ``triton_gemm.nvfp4_linear_dequantized`` through one buffer the size of the largest weight,
    reserved as weights are prepared (at load, before the KV pool takes the free memory)."""

    name = "triton"

    def __init__(self, deterministic: bool, dequant_rows: int = 0) -> None:
        super().__init__(deterministic)
        self.dequant_rows = 0 if deterministic else dequant_rows
        self._buffer: torch.Tensor | None = None  #: bytes of the largest dequantized weight

    def prepare_linear(self, layer: nn.Module, packed: torch.Tensor, scales: torch.Tensor) -> bool:
        super().prepare_linear(layer, packed, scales)
        need = packed.shape[0] * packed.shape[1] * 4  # N x K bf16
        if self.dequant_rows and (self._buffer is None or self._buffer.numel() < need):
            self._buffer = None  # the smaller one freed first
            self._buffer = torch.empty(need, dtype=torch.uint8, device=packed.device)
        return False

    def linear(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
               act_scale: torch.Tensor | None) -> torch.Tensor:
        from hinge_nvfp4.triton_gemm import nvfp4_linear, nvfp4_linear_dequantized

        if (self.dequant_rows and act_scale is None and x.dim() == 2 and x.shape[0] >= self.dequant_rows
                and x.dtype in (torch.bfloat16, torch.float16)):
            return nvfp4_linear_dequantized(x, layer.nvfp4_packed, layer.nvfp4_scales, layer.row_scale,
                                            bias, self._buffer)
        a, scale = x, layer.row_scale
        if act_scale is not None:
            a, scale = reference.quantize_activation(x, act_scale).to(x.dtype), layer.row_scale * act_scale
        return nvfp4_linear(a, layer.nvfp4_packed, layer.nvfp4_scales, scale, bias,
                            deterministic=self.deterministic, out_dtype=x.dtype)

    def moe(self, layer: nn.Module, names: dict[str, str], x: torch.Tensor, topk_ids: torch.Tensor,
            topk_weights: torch.Tensor, *, w4a4: bool) -> torch.Tensor:
        from hinge_nvfp4.triton_moe import nvfp4_experts

        return nvfp4_experts(x, moe_weights(layer, names, "w13_", w4a4), moe_weights(layer, names, "w2_", w4a4),
                             topk_ids, topk_weights, activation=layer.spec.activation,
                             deterministic=self.deterministic)


class MmaKernel(TritonKernel):
    """``TritonKernel`` with decode GEMVs on the tensor cores: x of at most ``mma_gemv.MAX_ROWS``
    bf16 rows (contiguous, 16-byte aligned) against a weight whose N % 16 == 0 and K % 128 == 0
    runs ``mma_gemv``'s kernel on the weight's ``mma_layout.repack`` (a second copy of its codes
    and scales), cut by ``mma_tiling.tiling`` (K splits added in the kernel, warps a tile, ring
    depth; tuned by shape in ``$HINGE_NVFP4_MMA_PLAN``'s JSON file or the one shipped for the GPU
    (``mma_tiling.tuned_file``; ``device_name`` replaces the GPU's name)), whose epilogue
    applies the row scale and bias and writes bf16; anything else takes the Triton path. The
    cubins are built (or read from their disk cache) as weights need them; ``gemv`` and
    ``num_sms`` replace the launchers and the GPU's multiprocessor count (tests). ``layout``
    (default ``$HINGE_NVFP4_MMA_LAYOUT`` or ``LAYOUT``): the repacked weight's memory order,
    ``tile`` (a tile's supersteps together), ``super`` (``mma_layout.superstep_major``) or
    ``interleaved`` (``mma_layout.interleave``: each block's scales after its codes); ``columns``
    (default ``$HINGE_NVFP4_MMA_COLUMNS`` or ``mma_layout.COLUMNS``): the repack's column map
    (``mma_layout.COLUMN_MAPS``) where the tiling names none, the cubins built for it; ``form``
    (default ``$HINGE_NVFP4_MMA_FORM`` or ``FORM``): of ``mma_gemv.KERNELS``; ``spread`` (default
    ``$HINGE_NVFP4_MMA_SPREAD=1``, else off): launches spread evenly over the multiprocessors
    (``mma_gemv.MmaGemv``) where the tiling names nothing; ``trigger`` (default
    ``$HINGE_NVFP4_MMA_TRIGGER`` or ``read``): when a launch lets the kernel after it launch
    (``mma_gemv.TRIGGERS``) where the tiling names nothing. Launches of 9 .. 16
    rows (or from the tuned ``Rows16.from_rows`` on) take the tiling's own (``Tiling.rows16``, a
    second launcher) where the tuned file names one, else the same launcher with ``TILES16``
    tiles a warp where its form and ring are built with two; launches of the fewest rows take
    the launch the tiling names for them (``Tiling.few``, a third launcher) where it names one.

    Rows past 16 (``dequant_rows`` > 0, the default): up to ``dequant_rows - 1`` rows run the
    GEMV in launches of 16 rows; from ``dequant_rows`` rows (prefill) the weight is written in
    bf16 from the same repack (``MmaGemv.dequantize``) into the one buffer ``TritonKernel``
    reserves and multiplied by cuBLAS. Those layers then need no checkpoint codes:
    ``prepare_linear`` drops them and returns True (the quantizer frees the parameters), so a
    weight costs its 4.5 bits once. ``dequant_rows`` 0: the codes stay and more than 16 rows run
    the Triton GEMM (half a byte a weight more). Layers the GEMV cannot take (N % 16, K % 128)
    keep their codes and the Triton path, as do w4a4 calls."""

    name = "mma"
    LAYOUT = "tile"
    FORM = "plain"
    #: 16-row tiles a warp at 9 .. 16 rows where a tiling names no launch of its own for them
    #: (H100, 2026-12-06: two were faster with the plain form on every Qwen3-8B shape at the
    #: built-in rule's warps a tile, gate_up 39.5 -> 33.9 us; docs/nvfp4.md)
    TILES16 = 2

    def __init__(self, gemv: Any = None, num_sms: int | None = None, layout: str | None = None,
                 form: str | None = None, device_name: str | None = None, dequant_rows: int = 0,
                 columns: str | None = None, spread: bool | None = None, trigger: str | None = None,
                 row_scale: str | None = None) -> None:
        from hinge.devices import early_dependents
        from hinge_nvfp4 import mma_gemv, mma_layout, mma_tiling

        super().__init__(deterministic=False, dequant_rows=dequant_rows)
        #: the checkpoint's codes dropped where the repack serves every row count (class docstring)
        self.release_codes = self.dequant_rows > 0
        self.layout = layout or os.environ.get("HINGE_NVFP4_MMA_LAYOUT") or self.LAYOUT
        if self.layout not in mma_layout.LAYOUTS:
            raise ValueError(f"nvfp4 kernel 'mma' layout {self.layout!r}: the layouts are tile, "
                             "super and interleaved (HINGE_NVFP4_MMA_LAYOUT)")
        self.columns = columns or os.environ.get("HINGE_NVFP4_MMA_COLUMNS") or mma_layout.COLUMNS
        if self.columns not in mma_layout.COLUMN_MAPS:
            raise ValueError(f"nvfp4 kernel 'mma' column map {self.columns!r}: the maps are "
                             f"{', '.join(mma_layout.COLUMN_MAPS)} (HINGE_NVFP4_MMA_COLUMNS)")
        self.form = form or os.environ.get("HINGE_NVFP4_MMA_FORM") or self.FORM
        if self.form not in mma_gemv.KERNELS:
            raise ValueError(f"nvfp4 kernel 'mma' form {self.form!r}: the forms are "
                             f"{', '.join(mma_gemv.KERNELS)} (HINGE_NVFP4_MMA_FORM)")
        self._stand_in = gemv
        #: [gate | up] layers paired and silu_mul in the GEMV's epilogue ($HINGE_NVFP4_MMA_GATED=0: not)
        self.fuse_gated = os.environ.get("HINGE_NVFP4_MMA_GATED", "1") != "0"
        #: programmatic dependent launch (on Hopper unless $HINGE_PDL=0: hinge.devices.early_dependents)
        self.pdl = gemv is None and early_dependents("cuda")
        #: the GEMV right behind a gated one (the MLP's down) launched early too
        #: ($HINGE_NVFP4_MMA_AFTER_GATED=early), or only once the gated GEMV has ended (after);
        #: unset: early where its launches are spread over the multiprocessors (H100, 2026-12-06:
        #: 369.4 -> 376.5 tokens/s end to end with both, 370.1 spread alone; early alone was no
        #: faster there and slower on the H200, 2026-12-03, without spread), else after
        self.after_gated = os.environ.get("HINGE_NVFP4_MMA_AFTER_GATED") or None
        if self.after_gated not in (None, "early", "after"):
            raise ValueError(f"HINGE_NVFP4_MMA_AFTER_GATED={self.after_gated}: early or after (or unset: "
                             "early where the launches are spread)")
        self._behind_gated = False  #: the last launch was a gated GEMV's
        #: module-name endings whose GEMVs launch only once the kernel before them ends
        #: ($HINGE_NVFP4_MMA_LATE=qkv_proj,o_proj: an experiment's switch; sets nvfp4_mma_early)
        self.late = tuple(p for p in os.environ.get("HINGE_NVFP4_MMA_LATE", "").split(",") if p)
        #: launches spread evenly over the multiprocessors where a tiling names nothing
        #: ($HINGE_NVFP4_MMA_SPREAD=1; mma_gemv.MmaGemv spread)
        self.spread = spread if spread is not None else os.environ.get("HINGE_NVFP4_MMA_SPREAD", "0") == "1"
        #: when a GEMV lets the kernel after it launch where a tiling names nothing
        #: ($HINGE_NVFP4_MMA_TRIGGER: read, the default, or start; mma_gemv.TRIGGERS)
        self.trigger = trigger or os.environ.get("HINGE_NVFP4_MMA_TRIGGER") or "read"
        if self.trigger not in mma_gemv.TRIGGERS:
            raise ValueError(f"nvfp4 kernel 'mma' trigger {self.trigger!r}: one of {', '.join(mma_gemv.TRIGGERS)} "
                             "(HINGE_NVFP4_MMA_TRIGGER)")
        #: when a GEMV reads its epilogue's row_scale where a tiling names no time
        #: ($HINGE_NVFP4_MMA_ROW_SCALE: end, the default, start or wait; mma_gemv.ROW_SCALE_READS)
        self.row_scale = row_scale or os.environ.get("HINGE_NVFP4_MMA_ROW_SCALE") or "end"
        if self.row_scale not in mma_gemv.ROW_SCALE_READS:
            raise ValueError(f"nvfp4 kernel 'mma' row_scale {self.row_scale!r}: one of "
                             f"{', '.join(mma_gemv.ROW_SCALE_READS)} (HINGE_NVFP4_MMA_ROW_SCALE)")
        #: (stages, kwarps, form, prefetch, tiles16, columns, rows16_from, spread, trigger, row_scale)
        #: -> launcher
        self._gemvs: dict[tuple, Any] = {}
        #: 16-row tiles a warp at 9 .. 16 rows where the launcher's form and ring allow two
        #: ($HINGE_NVFP4_MMA_TILES16, default ``TILES16``; mma_gemv.MmaGemv tiles16)
        self.tiles16 = int(os.environ.get("HINGE_NVFP4_MMA_TILES16", self.TILES16))
        if self.tiles16 not in (1, 2):
            raise ValueError(f"HINGE_NVFP4_MMA_TILES16={self.tiles16}: 1 or 2 tiles a warp")
        if device_name is None and gemv is None:
            device_name = torch.cuda.get_device_name()
        self._tuned = mma_tiling.tuned_tilings(device_name=device_name)
        self._num_sms = num_sms or torch.cuda.get_device_properties(
            torch.cuda.current_device()).multi_processor_count

        if gemv is None:
            self._gemv(mma_tiling.Tiling(1, 8, 1, mma_tiling.STAGES))  # refuses a GPU it cannot run on, now

    def _gemv(self, plan: Any, rows16: Any = None) -> Any:
        """The launcher of a tiling (``rows16``: of its tuned launch of 9 .. 16 rows), shared by
        the layers that take the same (stages, warps a tile, form, prefetch, tiles a warp, column
        map, fewest rows of its 16-row kernel)."""
        from hinge_nvfp4 import mma_gemv
        from hinge_nvfp4.mma_gemv import PREFETCH

        prefetch = PREFETCH if plan.prefetch is None else plan.prefetch
        columns = plan.columns or self.columns
        spread = self.spread if plan.spread is None else plan.spread
        trigger = plan.trigger or self.trigger
        row_scale = (plan.row_scale or self.row_scale) if self.pdl else "end"  # (about the wait: a PDL build's)
        if rows16 is not None:
            key = (plan.stages, rows16.kwarps, rows16.form, prefetch, rows16.tiles, columns, rows16.from_rows,
                   spread, trigger, row_scale)
        else:  # two tiles a warp at 9 .. 16 rows where this form and ring are built with them
            form = plan.form or self.form
            t2 = mma_gemv.two_tiles_built(form, plan.stages, plan.kwarps)
            key = (plan.stages, plan.kwarps, form, prefetch, self.tiles16 if t2 else 1, columns,
                   mma_gemv.SET_ROWS + 1, spread, trigger, row_scale)
        stand_in = getattr(self._stand_in, "columns", columns)
        if stand_in != columns:
            raise ValueError(f"the launcher stood in computes column map {stand_in!r}, the layer is "
                             f"repacked in {columns!r}")
        if key not in self._gemvs:
            self._gemvs[key] = self._stand_in or _mma_launcher(*key[:4], pdl=self.pdl, tiles16=key[4],
                                                               columns=columns, rows16_from=key[6],
                                                               spread=spread, trigger=trigger,
                                                               row_scale=row_scale)
        return self._gemvs[key]

    def prepare_linear(self, layer: nn.Module, packed: torch.Tensor, scales: torch.Tensor) -> bool:
        from hinge_nvfp4 import mma_gemv, mma_layout, mma_tiling

        super().prepare_linear(layer, packed, scales)
        n, k = packed.shape[0], packed.shape[1] * 2
        layer.nvfp4_mma_words = layer.nvfp4_mma_scales = None
        if n % 16 or k % mma_layout.SUPERSTEP:
            return False
        layer.nvfp4_mma_pairs = pairs = gate_up_pairs(layer, n) if self.fuse_gated else 0
        row_scale = layer.row_scale
        if pairs:  # [gate | up]: tiles in pairs, so that a gated launch can fuse silu_mul
            order = mma_layout.pair_rows(n).to(packed.device)
            packed, scales, row_scale = packed[order], scales[order], row_scale[order]
        layer.nvfp4_mma_row_scale = row_scale.contiguous()
        layer.nvfp4_mma_tiling = plan = mma_tiling.tiling(n, k, self._num_sms, self._tuned)
        words, codes = mma_layout.repack(packed, scales, plan.columns or self.columns)
        words, codes = mma_layout.in_order(words, codes, plan.layout or self.layout)
        layer.nvfp4_mma_words, layer.nvfp4_mma_scales = words, codes
        layer.nvfp4_mma_gemv = gemv = self._gemv(plan)  # linear's launcher, looked up once
        #: the launcher of 9 .. 16 rows where the tiling names its own (else linear's)
        layer.nvfp4_mma_gemv16 = gemv16 = self._gemv(plan, plan.rows16) if plan.rows16 else gemv
        #: the fewest rows of a launch that takes gemv16
        layer.nvfp4_mma_rows16_from = plan.rows16.from_rows if plan.rows16 else mma_gemv.SET_ROWS + 1
        #: the launcher of 1 .. nvfp4_mma_few_upto rows where the tiling names a launch for them
        layer.nvfp4_mma_gemv_few = few = self._gemv(plan.few.plan) if plan.few else gemv
        layer.nvfp4_mma_few_upto = plan.few.upto if plan.few else 0
        prefix = getattr(getattr(layer, "spec", None), "prefix", "")
        if self.late and prefix.endswith(self.late):
            layer.nvfp4_mma_early = False
        if plan.splits > 1 or pairs:
            for launcher in {gemv, gemv16, few}:  # one to three launchers
                launcher.reserve_counters(n // 16 + n // 32 * bool(pairs), packed.device)
        if not self.release_codes:
            return False
        layer.nvfp4_packed = layer.nvfp4_scales = None  # every call reads the repack
        return True

    def _route(self, layer: nn.Module, x: torch.Tensor, act_scale: torch.Tensor | None) -> str:
        """``gemv`` (launches of up to 16 rows), ``dequant`` (the weight from the repack, then
        cuBLAS) or ``triton`` (the checkpoint's codes) for this call (class docstring)."""
        from hinge_nvfp4 import mma_gemv

        m = x.shape[0]
        if getattr(layer, "nvfp4_mma_words", None) is None or act_scale is not None:
            return "triton"
        if x.dtype == torch.bfloat16 and 1 <= m <= mma_gemv.MAX_ROWS:
            return "gemv"
        if not self.release_codes:
            return "triton"
        return "gemv" if x.dtype == torch.bfloat16 and 1 <= m < self.dequant_rows else "dequant"

    def linear(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
               act_scale: torch.Tensor | None) -> torch.Tensor:
        route = self._route(layer, x, act_scale)
        if route == "gemv":
            return self._launch(layer, x, bias, gated=False)
        self._behind_gated = False
        if route == "dequant":
            return self._dequantized(layer, x, bias)
        return super().linear(layer, x, bias, act_scale)

    def gated(self, layer: nn.Module, x: torch.Tensor, activation: str) -> torch.Tensor | None:
        """``silu(gate) * up`` of a paired [gate | up] layer in one launch (the activation in the
        GEMV's epilogue: ``hinge.layers.fast_triton.silu_mul``'s bits), or None where this call
        is not the tensor-core GEMV's (the caller then applies the activation itself)."""
        if (activation != "silu" or not getattr(layer, "nvfp4_mma_pairs", 0)
                or self._route(layer, x, None) != "gemv"):
            return None
        return self._launch(layer, x, None, gated=True)

    def _launch(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None, gated: bool) -> torch.Tensor:
        """The GEMV over x's rows, 16 at a time; x copied first where it is strided or not
        16-byte aligned."""
        from hinge_nvfp4 import mma_gemv

        m, n = x.shape[0], layer.nvfp4_mma_row_scale.shape[0]
        if not x.is_contiguous() or x.data_ptr() % 16:
            x = torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)
        if bias is not None and bias.dtype != torch.bfloat16:
            bias = bias.to(torch.bfloat16)
        behind = self.after_gated == "early" or (self.after_gated is None
                                                 and getattr(layer.nvfp4_mma_gemv, "spread", False))
        early = getattr(layer, "nvfp4_mma_early", True) and (behind or not self._behind_gated)
        self._behind_gated = gated
        plan = layer.nvfp4_mma_tiling
        out = torch.empty(m, n // 2 if gated else n, dtype=torch.bfloat16, device=x.device)
        for r0 in range(0, m, mma_gemv.MAX_ROWS):  # rows 16 apart: contiguous, 16-byte aligned
            rows = min(mma_gemv.MAX_ROWS, m - r0)
            part = (torch.empty(plan.splits, rows, n, dtype=torch.float32, device=x.device)
                    if plan.splits > 1 or gated else None)
            gemv = (layer.nvfp4_mma_gemv16 if rows >= layer.nvfp4_mma_rows16_from else
                    layer.nvfp4_mma_gemv_few if rows <= layer.nvfp4_mma_few_upto else layer.nvfp4_mma_gemv)
            gemv(layer.nvfp4_mma_words, layer.nvfp4_mma_scales, x[r0:r0 + rows], part, plan.groups_per_split,
                 row_scale=layer.nvfp4_mma_row_scale, bias=bias, out=out[r0:r0 + rows],
                 pair_tiles=layer.nvfp4_mma_pairs, gated=gated, early=early)
        return out

    def _dequantized(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ W^T (+ bias)`` by cuBLAS in bf16, W written from the repack into the shared
        buffer (x of another dtype is cast to bf16 and the result back: mma computes in bf16)."""
        from hinge_nvfp4.triton_gemm import times_weight, weight_view

        w = weight_view(self._buffer, layer.nvfp4_mma_row_scale.shape[0], x.shape[1], torch.bfloat16)
        layer.nvfp4_mma_gemv.dequantize(layer.nvfp4_mma_words, layer.nvfp4_mma_scales,
                                        layer.nvfp4_mma_row_scale, w, pair_tiles=layer.nvfp4_mma_pairs)
        y = times_weight(x.to(torch.bfloat16), w, bias)
        return y.to(x.dtype)


def gate_up_pairs(layer: nn.Module, n: int) -> int:
    """Tiles a half of a fused [gate | up] layer the MMA GEMV pairs (0: not one): two equal
    partitions of whole 16-row tiles, all NVFP4, no bias."""
    spec = getattr(layer, "spec", None)
    sizes = tuple(spec.output_sizes_per_partition) if spec is not None else ()
    if (len(sizes) != 2 or sizes[0] != sizes[1] or sum(sizes) != n or n % 32
            or getattr(layer, "plain_parts", ()) or getattr(layer, "bias", None) is not None):
        return 0
    return n // 32


def _mma_launcher(stages: int, kwarps: int, form: str, prefetch: int, pdl: bool = False,
                  tiles16: int = 1, columns: str | None = None, rows16_from: int | None = None,
                  spread: bool | str = False, trigger: str = "read", row_scale: str = "end") -> Any:
    """The kernel for this GPU's architecture, a ring ``stages`` deep, ``kwarps`` warps a tile
    and copies asking L2 for ``prefetch`` bytes (``pdl``: built and launched for programmatic
    dependent launch; ``tiles16`` tiles a warp at 9 .. 16 rows; the cubin of as many warps a
    block as ``kwarps`` needs: ``mma_gemv.cubin_warps``; for weights in column map ``columns``;
    its 16-row kernel from ``rows16_from`` rows on; ``spread``: its blocks spread evenly over the
    multiprocessors; ``trigger``: when it lets the kernel after it launch; ``row_scale``: when
    it reads its epilogue's row_scale, ``mma_gemv.ROW_SCALE_READS``, "end" without PDL), built or
    read from the disk cache."""
    from hinge_nvfp4 import mma_gemv, mma_layout

    columns = columns or mma_layout.COLUMNS
    rows16_from = rows16_from or mma_gemv.SET_ROWS + 1
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        raise ValueError(f"nvfp4 kernel 'mma' needs compute capability >= 9.0 (its bf16x2 "
                         f"multiplies and bulk copies are Hopper's), this GPU has {major}.{minor}; "
                         "use kernel=triton")
    cubin = mma_gemv.cached_cubin(f"sm_{major}{minor}", stages=stages, prefetch=prefetch, pdl=pdl,
                                  warps=mma_gemv.cubin_warps(kwarps, form), columns=columns,
                                  trigger=trigger if pdl else "read",  # (no trigger without PDL)
                                  row_scale=row_scale if pdl else "end", wg=form in mma_gemv.WG_FORMS)
    return mma_gemv.MmaGemv(cubin, form, stages, kwarps, pdl, tiles16=tiles16, columns=columns,
                            rows16_from=rows16_from, spread=spread)
