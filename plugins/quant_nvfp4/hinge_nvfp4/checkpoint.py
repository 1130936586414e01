"""What an NVFP4 checkpoint's quantization config says: layout, excluded modules, which scales
its files hold.

Two layouts store the same codes and block scales:

    ModelOpt            <p>.weight  <p>.weight_scale  <p>.weight_scale_2 = amax/2688   <p>.input_scale
    compressed-tensors  <p>.weight_packed  <p>.weight_scale  <p>.weight_global_scale = 2688/amax
                        <p>.input_global_scale = 1/input_scale     (the reciprocal convention)

ModelOpt's config is ``hf_quant_config.json`` (``quantization: {quant_algo, kv_cache_quant_algo,
group_size, exclude_modules}``) and/or config.json's ``quantization_config`` (``quant_method:
modelopt``, ``quant_algo``, ``ignore``, ``kv_cache_scheme``); compressed-tensors' is
``quantization_config`` with ``format: nvfp4-pack-quantized``, ``config_groups`` and ``ignore``.
Excluded names match as vLLM matches them: exactly, or as a glob (``*`` any run of characters)
over the whole module name; compressed-tensors' ``re:`` entries are regular expressions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MODELOPT_ALGOS = {"NVFP4": True, "W4A16_NVFP4": False}  #: quant_algo -> has input_scale
CT_FORMAT = "nvfp4-pack-quantized"
GROUP_SIZE = 16
#: a composite checkpoint (Qwen3.5 vision-language) names its text model so; hinge's names do not
COMPOSITE_PREFIX = "model.language_model."


@dataclass(frozen=True)
class CheckpointFormat:
    """The per-checkpoint settings the quantizer follows (defaults: a ModelOpt NVFP4 checkpoint
    with nothing excluded, which is what a quantizer built without a checkpoint assumes)."""

    layout: str = "modelopt"  #: "modelopt" or "compressed-tensors"
    exclude: tuple[str, ...] = ()
    has_input_scale: bool = True  #: False for weight-only checkpoints (W4A16_NVFP4)
    kv_cache_fp8: bool = False  #: k_scale / v_scale are stored (and read)

    @property
    def names(self) -> dict[str, str]:
        """Our role -> the tensor suffix this layout uses."""
        if self.layout == "compressed-tensors":
            return {"weight": "weight_packed", "weight_scale": "weight_scale",
                    "weight_scale_2": "weight_global_scale", "input_scale": "input_global_scale"}
        return {"weight": "weight", "weight_scale": "weight_scale",
                "weight_scale_2": "weight_scale_2", "input_scale": "input_scale"}

    @property
    def reciprocal_scales(self) -> bool:
        return self.layout == "compressed-tensors"

    def is_excluded(self, module: str) -> bool:
        """Whether the checkpoint linear ``module`` (model namespace) stays unquantized."""
        return any(_matches(pattern, module) for pattern in self.exclude)


def _matches(pattern: str, module: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    if pattern.startswith(COMPOSITE_PREFIX):
        pattern = "model." + pattern[len(COMPOSITE_PREFIX):]
    if pattern == module:
        return True
    if "*" not in pattern:
        return False
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, module) is not None


def read_format(quantization_config: dict | None, hf_quant_config: dict | None) -> CheckpointFormat:
    """The settings of a checkpoint from its two config sources; errors name what is unsupported."""
    if isinstance(hf_quant_config, dict) and isinstance(hf_quant_config.get("quantization"), dict):
        return _modelopt(hf_quant_config["quantization"], "hf_quant_config.json")
    qc = quantization_config if isinstance(quantization_config, dict) else {}
    method = str(qc.get("quant_method", "")).lower()
    if method == "modelopt":
        return _modelopt(qc, "config.json quantization_config")
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if not qc:
        return CheckpointFormat()
    raise ValueError(f"quantization_config has quant_method {qc.get('quant_method')!r}; the nvfp4 "
                     "quantizer loads ModelOpt (modelopt) and compressed-tensors NVFP4 checkpoints")


def _modelopt(q: dict[str, Any], where: str) -> CheckpointFormat:
    algo = str(q.get("quant_algo", ""))
    if algo.upper() not in MODELOPT_ALGOS:
        raise ValueError(f"{where}: quant_algo {algo!r} is not supported by the nvfp4 quantizer "
                         f"(supported: {', '.join(MODELOPT_ALGOS)}); NVFP4_AWQ, mixed precision and "
                         "W4A8 checkpoints need other kernels")
    group = q.get("group_size", GROUP_SIZE)
    if group is not None and int(group) != GROUP_SIZE:
        raise ValueError(f"{where}: group_size {group}; NVFP4 blocks are {GROUP_SIZE} elements")
    kv = q.get("kv_cache_quant_algo")
    if kv is None and isinstance(q.get("kv_cache_scheme"), dict):
        kv = "FP8" if q["kv_cache_scheme"].get("num_bits") == 8 else "other"
    if kv not in (None, "FP8"):
        raise ValueError(f"{where}: kv_cache_quant_algo {kv!r} is not supported (FP8 or none)")
    exclude = q.get("exclude_modules", q.get("ignore")) or []
    return CheckpointFormat("modelopt", tuple(exclude), MODELOPT_ALGOS[algo.upper()], kv == "FP8")


def _compressed_tensors(qc: dict[str, Any]) -> CheckpointFormat:
    groups = qc.get("config_groups") or {}
    formats = {str(qc.get("format", "")).lower()} | {
        str(g.get("format", "")).lower() for g in groups.values() if isinstance(g, dict) and g.get("format")}
    formats.discard("")
    if formats != {CT_FORMAT}:
        raise ValueError(f"compressed-tensors checkpoint with format(s) {sorted(formats)}; the nvfp4 "
                         f"quantizer loads {CT_FORMAT!r} only")
    has_input = any(isinstance(g, dict) and g.get("input_activations") for g in groups.values())
    for name, g in groups.items():
        w = (g or {}).get("weights") or {}
        if w.get("group_size", GROUP_SIZE) != GROUP_SIZE or w.get("num_bits", 4) != 4:
            raise ValueError(f"compressed-tensors config group {name!r}: weights {w}; NVFP4 has "
                             f"4-bit weights in groups of {GROUP_SIZE}")
    kv = qc.get("kv_cache_scheme")
    return CheckpointFormat("compressed-tensors", tuple(qc.get("ignore") or []), has_input,
                            isinstance(kv, dict) and kv.get("num_bits") == 8)
