"""Build a model from a local Hugging Face directory and fill it from safetensors (never pickle).

    config.json -> registry class -> build on ``device`` in ``dtype`` (linears and experts via the
    quantizer) -> every checkpoint tensor into its parameter: a fused linear's partition or an
    expert's slice through the parameter's ``weight_loader``, anything else by name
    -> quantizer.process_weights_after_loading(layer) for every Linear (fused: once),
       process_moe_weights_after_loading(layer) for every expert set
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from tqdm.auto import tqdm

from hinge.layers.linear import Linear, Route, TensorParallel
from hinge.layers.moe import FusedMoE
from hinge.layers.weights import default_weight_loader, load_into
from hinge.models.base import CausalLM, ModelConfig, read_json
from hinge.models.registry import resolve_architecture

if TYPE_CHECKING:
    from hinge.contracts import Quantizer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def load_config(path: str | Path) -> tuple[type[CausalLM], ModelConfig]:
    """The model class and ``ModelConfig`` of a HF directory, without touching weights."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist; pass a local HF checkpoint dir")
    raw = read_json(path / "config.json")
    cls = resolve_architecture(raw.get("architectures"), path / "config.json")
    hf_config = cls.load_hf_config(path, raw)
    return cls, ModelConfig.from_hf(hf_config, raw, path)


def checkpoint_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint: one file, or the shards its index names."""
    if (path / INDEX_FILE).is_file():
        index = read_json(path / INDEX_FILE)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{path / INDEX_FILE} has no `weight_map`; re-export the checkpoint")
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{path / INDEX_FILE} names shard(s) that are missing: {', '.join(missing)}"
            )
        return [path / s for s in shards]
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    pickles = [p for p in PICKLE_FILES if (path / p).exists()]
    if pickles:
        raise ValueError(
            f"{path} holds only pickle weights ({', '.join(pickles)}); hinge loads safetensors only "
            "(pickle can run code). Convert once with transformers: "
            "`AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)`."
        )
    raise FileNotFoundError(f"no {SINGLE_FILE} or {INDEX_FILE} in {path}")


def loadable_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters (tied ones once) and persistent buffers (a quantizer's scales may be buffers)."""
    out: dict[str, torch.Tensor] = dict(model.named_parameters())
    for mod_name, module in model.named_modules():
        for buf_name, buf in module.named_buffers(recurse=False):
            if buf_name not in module._non_persistent_buffers_set:
                out[f"{mod_name}.{buf_name}" if mod_name else buf_name] = buf
    return out


def checkpoint_routes(model: nn.Module) -> dict[str, Route]:
    """Checkpoint tensor name (model namespace) -> the parameter, partition and expert it loads
    into, for every fused or stacked layer (``Linear``, ``FusedMoE``)."""
    routes: dict[str, Route] = {}
    for name, module in model.named_modules():
        if isinstance(module, (Linear, FusedMoE)):
            routes.update(module.checkpoint_routes(name))
    return routes


def load_weights(
    model: CausalLM, files: list[Path], *, progress: bool = True, quantizer: Quantizer | None = None
) -> None:
    """Fill ``model``'s tensors from the checkpoint; error on missing/unexpected/mis-shaped ones.

    A name goes through ``model.checkpoint_param_name`` and ``quantizer.map_checkpoint_name``
    (None = ignore). A tensor of a linear or expert set is loaded by its parameter's
    ``weight_loader`` with its partition (and expert); any other tensor is copied into the
    parameter or persistent buffer of the same name. Errors name the checkpoint tensor.
    """
    params = loadable_tensors(model)
    routes = checkpoint_routes(model)
    routed = {route.param for route in routes.values()}
    expected = set(routes) | (set(params) - routed)
    loaded: set[str] = set()
    unexpected: list[str] = []
    keys = {file: _read_keys(file) for file in files}
    total = sum(len(k) for k in keys.values())
    bar = tqdm(total=total, desc=f"Loading {len(files)} safetensors file(s)", unit="tensor",
               disable=not progress)
    for file in files:
        with _open(file) as f:
            for ckpt_name in keys[file]:
                bar.update(1)
                name = model.checkpoint_param_name(ckpt_name)
                if name is not None and quantizer is not None:
                    name = quantizer.map_checkpoint_name(name)
                if name is None:
                    continue
                if name not in expected:
                    unexpected.append(ckpt_name)
                    continue
                _load_one(params, routes.get(name), name, _get_tensor(f, file, ckpt_name), file, ckpt_name)
                loaded.add(name)
    bar.close()
    missing = sorted(expected - loaded)
    if missing or unexpected:
        lines = []
        if missing:
            lines.append(f"missing from the checkpoint ({len(missing)}): {', '.join(missing[:20])}")
        if unexpected:
            lines.append(f"unexpected in the checkpoint ({len(unexpected)}): {', '.join(sorted(unexpected)[:20])}")
        raise ValueError(
            f"checkpoint {files[0].parent} does not match {type(model).__name__}:\n  "
            + "\n  ".join(lines)
        )


def _load_one(params: dict[str, torch.Tensor], route: Route | None, name: str, tensor: torch.Tensor,
              file: Path, ckpt_name: str) -> None:
    """One checkpoint tensor into its parameter; errors name the tensor, the file and the target."""
    target = name if route is None else route.param
    param = params[target]
    try:
        if route is None:
            default_weight_loader(param, tensor)
        else:
            load_into(param, tensor, route.shard_id, route.expert_id)
    except ValueError as exc:
        where = "" if route is None else (
            f" (partition {route.shard_id}" + ("" if route.expert_id is None else f", expert {route.expert_id}")
            + ")")
        raise ValueError(
            f"{file}: tensor {ckpt_name} {exc} for {target}{where}; config.json and weights disagree"
        ) from None


def _unreadable(file: Path, exc: Exception) -> ValueError:
    return ValueError(f"{file} is not a readable safetensors file ({exc}); re-download or re-export it")


def _open(file: Path):
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError) as exc:
        raise _unreadable(file, exc) from exc


def _read_keys(file: Path) -> list[str]:
    with _open(file) as f:
        return list(f.keys())


def _get_tensor(f, file: Path, name: str) -> torch.Tensor:
    try:
        return f.get_tensor(name)
    except (SafetensorError, OSError) as exc:
        raise _unreadable(file, exc) from exc


def load_model(
    path: str | Path,
    *,
    device: str | torch.device,
    dtype: torch.dtype,
    quantizer: Quantizer,
    deterministic: bool = False,
    progress: bool = True,
    rank: int = 0,
    world_size: int = 1,
    load_format: str = "auto",
) -> CausalLM:
    """Load the causal LM of a local HF directory onto ``device`` in ``dtype``.

    With ``world_size > 1`` the model is this ``rank``'s tensor-parallel shard: column- and
    row-parallel layers hold their slice of each checkpoint tensor (no collectives run yet).
    ``load_format="dummy"`` reads only config.json and fills the weights with seeded random
    values (``initialize_dummy_weights``), for benchmarks of real shapes without a checkpoint.
    """
    path = Path(path)
    cls, config = load_config(path)
    if load_format not in ("auto", "dummy"):
        raise ValueError(f"load_format {load_format!r} is unknown; use 'auto' (the checkpoint's "
                         "safetensors) or 'dummy' (random weights, config.json only)")
    files = checkpoint_files(path) if load_format == "auto" else []
    check_quantizer_claims(quantizer, config, path)
    quantizer.load_checkpoint_config(config)
    with torch.device(device):
        model = cls(config, quantizer=quantizer, dtype=dtype, deterministic=deterministic,
                    tp=TensorParallel(rank, world_size))
    if load_format == "dummy":
        initialize_dummy_weights(model)
    else:
        load_weights(model, files, progress=progress, quantizer=quantizer)
    for module in model.modules():
        if isinstance(module, Linear):
            quantizer.process_weights_after_loading(module)
        elif isinstance(module, FusedMoE):
            quantizer.process_moe_weights_after_loading(module)
    model.eval()
    model.requires_grad_(False)
    return model


def initialize_dummy_weights(model: nn.Module, seed: int = 0, scale: float = 0.02) -> None:
    """Every floating parameter and persistent buffer from a seeded uniform(-scale, scale) (norm
    weights around 1), on the model's device; integer tensors (packed codes) stay as built."""
    for name, tensor in loadable_tensors(model).items():
        if not tensor.is_floating_point():
            continue
        gen = torch.Generator(device=tensor.device).manual_seed(seed + zlib.crc32(name.encode()))
        with torch.no_grad():
            if tensor.element_size() == 1:  # fp8 scales: fill in float32, then cast
                tensor.copy_(torch.rand(tensor.shape, generator=gen, device=tensor.device))
            else:
                tensor.uniform_(-scale, scale, generator=gen)
                if "norm" in name:
                    tensor.add_(1.0)


def check_quantizer_claims(quantizer: Quantizer, config: ModelConfig, path: Path) -> None:
    """Refuse a checkpoint ``quantizer`` does not claim, by the one rule ``quantizer = auto`` uses."""
    from hinge.plugins.checks import checkpoint_quant_methods, quantizer_claims

    methods = checkpoint_quant_methods(
        {"quantization_config": config.quantization_config, "hf_quant_config": config.hf_quant_config})
    capabilities = getattr(quantizer, "capabilities", None)
    if capabilities is None:
        raise TypeError(f"quantizer {type(quantizer).__name__} declares no `capabilities` "
                        "(a QuantizerCapabilities); hinge.contracts.Quantizer requires it")
    if not quantizer_claims(capabilities, methods):
        raise ValueError(
            f"quantizer {type(quantizer).__name__} does not claim the checkpoint {path} "
            f"({'quantized: ' + ', '.join(sorted(methods)) if methods else 'unquantized'}); "
            "select the quantizer made for it (`hinge plugins` lists them) or quantizer=auto"
        )
