"""``NVFP4Quantizer``: ModelOpt and compressed-tensors NVFP4 weights for linear layers and experts.

    load_checkpoint_config -> create_weights / create_moe_weights (params.py; excluded partitions
    plain) -> loaders -> process_*_after_loading (per-row global scales, reciprocal scales of
    compressed-tensors inverted, the kernel's layout) -> apply / apply_moe (kernels.py)

Semantics (docs/nvfp4.md): ``activations = w4a16`` (default) multiplies the compute-dtype
activations by the dequantized weights; ``w4a4`` first quantizes the activations to NVFP4 with
the checkpoint's ``input_scale``, as Blackwell's FP4 GEMM does. FP8 KV scales are loaded and
kept on the q|k|v layer (``k_scale``, ``v_scale``); the KV cache stays in the model dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from hinge.contracts import Quantizer
from hinge.layers import batch_invariant
from hinge_nvfp4.checkpoint import CheckpointFormat, read_format
from hinge_nvfp4.kernels import select_kernel
from hinge_nvfp4.options import NVFP4Options
from hinge_nvfp4.params import create_linear_params, create_moe_params
from hinge_nvfp4.plugin import NVFP4_SPEC

if TYPE_CHECKING:
    from torch import nn

    from hinge.contracts import LinearSpec, MoESpec


class NVFP4Quantizer(Quantizer):
    capabilities = NVFP4_SPEC.capabilities

    def __init__(self, options: NVFP4Options | None = None, build: Any = None) -> None:
        self.options = options or NVFP4Options()
        self.build = build
        self.deterministic = bool(getattr(build, "deterministic", False))
        self.device = str(getattr(build, "device", "cpu"))
        self.format = CheckpointFormat()
        self.w4a4 = self.options.activations == "w4a4"
        self.kernel = select_kernel(self.options, self.device, self.deterministic,
                                    dtype=getattr(build, "dtype", None))

    # -- checkpoint ---------------------------------------------------------------------------

    def load_checkpoint_config(self, config: Any) -> None:
        self.format = read_format(getattr(config, "quantization_config", None),
                                  getattr(config, "hf_quant_config", None))
        if self.w4a4 and not self.format.has_input_scale:
            raise ValueError("quantizer_options activations=w4a4 needs the checkpoint's input_scale, "
                             "and this weight-only (W4A16_NVFP4) checkpoint has none; use w4a16")

    def map_checkpoint_name(self, name: str) -> str | None:
        if name.endswith((".k_scale", ".v_scale")):
            if not self.format.kv_cache_fp8:
                return None  # KV scales the config does not declare: not ours to read
            head, _, leaf = name.rpartition(".")
            if head.endswith(".self_attn"):  # compressed-tensors keeps them on the attention module
                return f"{head}.{leaf[0]}_proj.{leaf}"
        return name

    # -- linear layers ------------------------------------------------------------------------

    def create_weights(self, layer: nn.Module, spec: LinearSpec) -> None:
        create_linear_params(layer, spec, self.format)
        layer.nvfp4_sizes = tuple(spec.output_sizes_per_partition[i] for i in layer.nvfp4_parts)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        if not layer.nvfp4_parts:
            return
        names, device = self.format.names, getattr(layer, self.format.names["weight"]).device
        sizes = torch.tensor(layer.nvfp4_sizes, device=device)
        scale_2 = self._scale(getattr(layer, names["weight_scale_2"]))
        layer.register_buffer("row_scale", torch.repeat_interleave(scale_2, sizes), persistent=False)
        if self.format.has_input_scale:
            # one activation quantization per GEMM: the largest scale of the fused partitions
            input_scale = self._scale(getattr(layer, names["input_scale"])).amax()
            layer.register_buffer("act_scale", input_scale, persistent=False)
        order = list(layer.nvfp4_parts) + list(layer.plain_parts)
        layer.out_perm = None
        if order != sorted(order):
            spans = _spans(layer.spec.output_sizes_per_partition)
            cols = torch.cat([torch.arange(*spans[i]) for i in order])
            layer.out_perm = torch.argsort(cols).to(device)
        if self.kernel.prepare_linear(layer, packed=getattr(layer, names["weight"]),
                                      scales=getattr(layer, names["weight_scale"])):
            for name in (names["weight"], names["weight_scale"]):  # the kernel keeps its own copy
                param = getattr(layer, name)
                param.data = torch.empty(0, dtype=param.dtype, device=param.device)

    def apply(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if not layer.nvfp4_parts:
            return self._plain(x, layer.weight, layer.bias)
        lead, rows = x.shape[:-1], x.reshape(-1, x.shape[-1])
        mixed = bool(layer.plain_parts)
        act_scale = layer.act_scale if self.w4a4 else None
        y = self.kernel.linear(layer, rows, None if mixed else layer.bias, act_scale)
        if mixed:
            y = torch.cat([y, self._plain(rows, layer.weight_plain, None)], dim=-1)
            if layer.out_perm is not None:
                y = y.index_select(-1, layer.out_perm)
            if layer.bias is not None:
                y = y + layer.bias
        return y.reshape(*lead, y.shape[-1])

    def apply_gated(self, layer: nn.Module, x: torch.Tensor, activation: str) -> torch.Tensor | None:
        """The kernel's GEMM with the activation in its epilogue (``kernel: mma`` at decode:
        ``MmaKernel.gated``), or None (w4a4, a mixed or plain layer, another kernel)."""
        gated = getattr(self.kernel, "gated", None)
        if gated is None or self.w4a4 or not layer.nvfp4_parts or layer.plain_parts:
            return None
        lead, rows = x.shape[:-1], x.reshape(-1, x.shape[-1])
        y = gated(layer, rows, activation)
        return None if y is None else y.reshape(*lead, y.shape[-1])

    def _plain(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.deterministic:
            return batch_invariant.linear(x, weight, bias)
        return F.linear(x, weight, bias)

    def _scale(self, stored: torch.Tensor) -> torch.Tensor:
        return 1.0 / stored if self.format.reciprocal_scales else stored

    # -- experts ------------------------------------------------------------------------------

    def create_moe_weights(self, layer: nn.Module, spec: MoESpec) -> None:
        excluded = [self.format.is_excluded(spec.checkpoint_name(e, s))
                    for e in range(spec.num_experts) for s in ("w1", "w3", "w2")]
        layer.nvfp4 = not all(excluded)
        if not layer.nvfp4:
            super().create_moe_weights(layer, spec)
        elif any(excluded):
            raise ValueError(f"experts {spec.prefix!r}: the checkpoint excludes some experts' "
                             "projections from quantization and not others; nvfp4 loads an expert "
                             "set quantized or plain as a whole")
        else:
            create_moe_params(layer, spec, self.format)

    def process_moe_weights_after_loading(self, layer: nn.Module) -> None:
        if not layer.nvfp4:
            return
        names, i = self.format.names, layer.spec.intermediate_size_per_partition
        s13 = self._scale(getattr(layer, "w13_" + names["weight_scale_2"]))  # (E, 2): gate, up
        s2 = self._scale(getattr(layer, "w2_" + names["weight_scale_2"]))  # (E,)
        layer.register_buffer("w13_row_scale", s13.repeat_interleave(i, dim=1), persistent=False)
        layer.register_buffer("w2_row_scale", s2[:, None].expand(-1, layer.spec.hidden_size).contiguous(),
                              persistent=False)
        if self.format.has_input_scale:
            layer.register_buffer("w13_act_scale", self._scale(getattr(layer, "w13_" + names["input_scale"])).amax(),
                                  persistent=False)
            layer.register_buffer("w2_act_scale", self._scale(getattr(layer, "w2_" + names["input_scale"])).amax(),
                                  persistent=False)
        self.kernel.prepare_moe(layer, names)

    def apply_moe(self, layer: nn.Module, x: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor) -> torch.Tensor:
        if not layer.nvfp4:
            return super().apply_moe(layer, x, topk_ids, topk_weights)
        return self.kernel.moe(layer, self.format.names, x, topk_ids, topk_weights, w4a4=self.w4a4)


def _spans(sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    out, start = [], 0
    for size in sizes:
        out.append((start, start + size))
        start += size
    return out
