"""``hinge quantize --method nvfp4``: a bf16 / fp32 Hugging Face checkpoint -> a ModelOpt-format
NVFP4 checkpoint that hinge (and vLLM, sglang, TensorRT-LLM) load.

    source config -> hinge's model structure (which checkpoint tensors are linear partitions,
    which are experts) -> input amax (calibration through hinge, or given) -> per tensor:
      linear partition   weight (uint8), weight_scale (fp8), weight_scale_2, input_scale
      expert projection  the same, per expert
      anything else      copied as stored
    -> model.safetensors, config.json (+ quantization_config), hf_quant_config.json, the rest copied

ModelOpt's recipe for the same amax, byte for byte: the partitions of one fused layer (q|k|v,
gate|up, a DeltaNet's in_proj) share one ``weight_scale_2`` (their largest weight amax) and one
``input_scale`` (their input's amax / 2688), as ModelOpt's ``preprocess_linear_fusion`` makes
them; an expert's gate and up share one ``weight_scale_2`` (ModelOpt's fused gate_up quantizer);
all experts of a block share one ``input_scale`` per projection. Linears that ModelOpt leaves
unquantized by default (routers, DeltaNet ``in_proj_a`` / ``in_proj_b``, vision, MTP, ...), those
``--exclude`` names, and those whose input size is not a multiple of 16 stay as stored and are
listed in ``exclude_modules``.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hinge.contracts import LinearSpec, MoESpec
from hinge_nvfp4 import format as fp4
from hinge_nvfp4.checkpoint import _matches

logger = logging.getLogger(__name__)

#: ModelOpt's default_disabled_quantizers (quantizer-name globs), applied as ModelOpt applies them
DEFAULT_EXCLUDE = ("*block_sparse_moe.gate*", "*linear_attn.conv1d*", "*linear_attn.in_proj_a*",
                   "*linear_attn.in_proj_b*", "*lm_head*", "*mixer.conv1d*", "*mlp.gate.*",
                   "*mlp.shared_expert_gate.*", "*output_layer*", "*proj_out.*", "*router*", "mtp.*",
                   "output.*", "*embed_vision*", "*vision_tower*", "*visual*", "*vision_model*",
                   "*multi_modal_projector*")
COPIED = ("config.json", "hf_quant_config.json", "model.safetensors", "model.safetensors.index.json")


@dataclass
class Plan:
    """Which checkpoint tensor (model namespace) is what: ``linears[name] = (group, module)``,
    ``experts[name] = (module, expert, shard)``; ``group`` names the fused layer it belongs to."""

    linears: dict[str, tuple[str, Any]] = field(default_factory=dict)
    experts: dict[str, tuple[str, Any, int, str]] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)


def excluded_by_default(module: str, patterns: tuple[str, ...]) -> bool:
    """ModelOpt matches quantizer names (``<module>.weight_quantizer``); user patterns match the
    module name itself too."""
    names = (module, f"{module}.weight_quantizer", f"{module}.input_quantizer")
    return any(_matches(p, n) for p in patterns for n in names)


def plan_model(model: torch.nn.Module, exclude: tuple[str, ...]) -> Plan:
    """The quantization plan of a hinge model (built from the source checkpoint)."""
    plan = Plan()
    patterns = DEFAULT_EXCLUDE + tuple(exclude)
    for name, module in model.named_modules():
        spec = getattr(module, "spec", None)
        if isinstance(spec, LinearSpec):
            for shard in spec.shard_names:
                if excluded_by_default(shard, patterns) or spec.input_size % fp4.BLOCK:
                    plan.excluded.append(shard)
                else:
                    plan.linears[f"{shard}.weight"] = (name, module)
        elif isinstance(spec, MoESpec):
            shards = [(e, s) for e in range(spec.num_experts) for s in ("w1", "w3", "w2")]
            names = [spec.checkpoint_name(e, s) for e, s in shards]
            if any(excluded_by_default(n, patterns) for n in names) or \
                    spec.hidden_size % fp4.BLOCK or spec.intermediate_size % fp4.BLOCK:
                plan.excluded.extend(names)
                continue
            for (e, s), ckpt in zip(shards, names, strict=True):
                plan.experts[f"{ckpt}.weight"] = (name, module, e, s)
    return plan


def source_tensors(src: Path) -> dict[str, tuple[Path, str]]:
    """Checkpoint tensor name -> (file, name) over every safetensors file of ``src``."""
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {src}; hinge quantize reads safetensors checkpoints")
    out = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            out.update((k, (file, k)) for k in f.keys())
    return out


def read(where: tuple[Path, str]) -> torch.Tensor:
    with safe_open(str(where[0]), framework="pt") as f:
        return f.get_tensor(where[1])


def quantize_checkpoint(src: str | Path, dst: str | Path, *, input_amax: dict[str, float] | None = None,
                        calib: str | None = None, calib_samples: int = 32, exclude: tuple[str, ...] = (),
                        device: str = "cpu", dtype: str = "auto", progress: bool = True) -> dict[str, Any]:
    """Quantize ``src`` into ``dst`` (see the module doc). ``input_amax`` (checkpoint linear name,
    or ``<experts module>.w13`` / ``.w2`` -> amax) skips calibration. Returns a summary."""
    from tqdm.auto import tqdm

    from hinge.models import load_config

    src, dst = Path(src), Path(dst)
    cls, config = load_config(src)
    if config.quantization_config or config.hf_quant_config:
        raise ValueError(f"{src} is already quantized; hinge quantize reads a bf16/fp16/fp32 checkpoint")
    if dst.exists() and any(dst.iterdir()):
        raise ValueError(f"{dst} exists and is not empty; choose a new output directory")
    with torch.device("meta"):  # the structure only: no weight is allocated
        model = cls(config, quantizer=_plain_quantizer(), dtype=torch.float32)
    plan = plan_model(model, tuple(exclude))
    del model
    if input_amax is None:
        from hinge_nvfp4.calibrate import calibrate, calibration_prompts

        prompts = calibration_prompts(calib, calib_samples)
        amax_by_module = calibrate(src, prompts, device=device,
                                   dtype=dtype if dtype != "auto" else (config.torch_dtype or "float32"),
                                   progress=progress)
        input_amax = _by_checkpoint_name(plan, amax_by_module)
    tensors = source_tensors(src)
    out: dict[str, torch.Tensor] = {}
    groups = _group_amax(plan, tensors)
    for ckpt_name, where in tqdm(sorted(tensors.items()), desc="Quantizing to NVFP4", unit="tensor",
                                 disable=not progress):
        name = ckpt_name if ckpt_name in plan.linears or ckpt_name in plan.experts else \
            _model_name(ckpt_name, plan)
        if name not in plan.linears and name not in plan.experts:
            out[ckpt_name] = read(where)
            continue
        prefix = ckpt_name[: -len(".weight")]
        module_name = prefix if name in plan.linears else _experts_key(plan, name)
        amax = input_amax.get(name[: -len(".weight")], input_amax.get(module_name))
        if amax is None:
            raise ValueError(f"no input amax for {name[: -len('.weight')]} (calibration did not reach it); "
                             "give more calibration prompts, or exclude it")
        packed, scales, scale_2 = fp4.quantize_weight(read(where), groups[name])
        out[f"{prefix}.weight"] = packed
        out[f"{prefix}.weight_scale"] = scales
        out[f"{prefix}.weight_scale_2"] = scale_2
        out[f"{prefix}.input_scale"] = fp4.global_scale(torch.tensor(amax, dtype=torch.float32))
    dst.mkdir(parents=True, exist_ok=True)
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    _write_configs(src, dst, sorted(set(plan.excluded) | _unquantized_matrices(tensors, plan)))
    for path in src.iterdir():
        if path.is_file() and path.name not in COPIED and not path.name.endswith(".safetensors"):
            shutil.copy2(path, dst / path.name)
    quantized = len(plan.linears) + len(plan.experts)
    return {"quantized_tensors": quantized, "excluded_modules": len(plan.excluded), "output": str(dst)}


def _plain_quantizer():
    from hinge.plugins import BuildContext
    from hinge.plugins.manager import get_plugin_manager

    spec = get_plugin_manager().get_component("quantizer", "none").spec
    return spec.build(None, BuildContext(device="cpu", dtype=torch.float32, deterministic=False, page_size=16))


def _model_name(ckpt_name: str, plan: Plan) -> str:
    """A composite checkpoint's text weights (``model.language_model.*``) in hinge's namespace."""
    if ckpt_name.startswith("model.language_model."):
        return "model." + ckpt_name[len("model.language_model."):]
    return ckpt_name


def _experts_key(plan: Plan, name: str) -> str:
    module_name, _, _, shard = plan.experts[name]
    return f"{module_name}.{'w2' if shard == 'w2' else 'w13'}"


def _by_checkpoint_name(plan: Plan, amax: dict[str, float]) -> dict[str, float]:
    """Calibrated amax by hinge module -> by checkpoint linear (experts: ``<module>.w13`` / ``.w2``)."""
    out: dict[str, float] = {}
    for name, (module_name, _) in plan.linears.items():
        if module_name in amax:
            out[name[: -len(".weight")]] = amax[module_name]
    for name in plan.experts:
        key = _experts_key(plan, name)
        if key in amax:
            out[key] = amax[key]
    return out


def _group_amax(plan: Plan, tensors: dict[str, tuple[Path, str]]) -> dict[str, torch.Tensor]:
    """The weight amax each quantized tensor is scaled by: its fused layer's (or expert's gate|up)
    largest; a tensor alone has its own."""
    by_ckpt = {_model_name(k, plan): v for k, v in tensors.items()}
    groups: dict[tuple, list[str]] = {}
    for name, (module_name, _) in plan.linears.items():
        groups.setdefault((module_name,), []).append(name)
    for name, (module_name, _, expert, shard) in plan.experts.items():
        groups.setdefault((module_name, expert, shard == "w2"), []).append(name)
    out = {}
    for members in groups.values():
        missing = [m for m in members if m not in by_ckpt]
        if missing:
            raise ValueError(f"the checkpoint has no tensor {missing[0]}; is it a complete checkpoint?")
        amax = torch.stack([read(by_ckpt[m]).abs().amax().float() for m in members]).amax()
        out.update((m, amax) for m in members)
    return out


def _unquantized_matrices(tensors: dict[str, tuple[Path, str]], plan: Plan) -> set[str]:
    """Modules whose weight is a matrix left as stored (embeddings, LM head, routers, convs): listed
    in ``exclude_modules`` as ModelOpt lists them, so no loader takes them for NVFP4 tensors."""
    out = set()
    for name, (file, key) in tensors.items():
        if not name.endswith(".weight") or _model_name(name, plan) in plan.linears or \
                _model_name(name, plan) in plan.experts:
            continue
        with safe_open(str(file), framework="pt") as f:
            if len(f.get_slice(key).get_shape()) >= 2:
                out.add(name[: -len(".weight")])
    return out


def _write_configs(src: Path, dst: Path, excluded: list[str]) -> None:
    from hinge import __version__

    producer = {"name": "hinge", "version": __version__}
    hf_quant = {"producer": producer, "quantization": {
        "quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": fp4.BLOCK,
        "exclude_modules": excluded}}
    (dst / "hf_quant_config.json").write_text(json.dumps(hf_quant, indent=4) + "\n")
    config = json.loads((src / "config.json").read_text())
    group = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": fp4.BLOCK}
    config["quantization_config"] = {
        "config_groups": {"group_0": {"input_activations": dict(group), "weights": dict(group),
                                      "targets": ["Linear"]}},
        "ignore": excluded, "quant_algo": "NVFP4", "kv_cache_scheme": None, "producer": producer,
        "quant_method": "modelopt"}
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
