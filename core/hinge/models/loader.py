"""Build a model from a local Hugging Face directory and fill it from safetensors (never pickle).

    config.json -> registry class -> build on ``device`` in ``dtype`` (linears via the quantizer)
    -> copy every checkpoint tensor into the parameter of the same name
    -> quantizer.process_weights_after_loading(layer) for every Linear
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from tqdm.auto import tqdm

from hinge.layers.linear import Linear
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


def load_weights(
    model: CausalLM, files: list[Path], *, progress: bool = True, quantizer: Quantizer | None = None
) -> None:
    """Copy checkpoint tensors into ``model``'s tensors; error on missing/unexpected names.

    Names go through ``model.checkpoint_param_name`` and then, if the quantizer defines it, its
    own ``checkpoint_param_name(name) -> str | None`` (None = ignore, e.g. KV-cache scales it
    does not use).
    """
    params = loadable_tensors(model)
    quant_map = getattr(quantizer, "checkpoint_param_name", None)
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
                if name is not None and quant_map is not None:
                    name = quant_map(name)
                if name is None:
                    continue
                param = params.get(name)
                if param is None:
                    unexpected.append(ckpt_name)
                    continue
                tensor = _get_tensor(f, file, ckpt_name)
                if tuple(tensor.shape) != tuple(param.shape):
                    raise ValueError(
                        f"{file}: tensor {ckpt_name} has shape {tuple(tensor.shape)}, "
                        f"the model expects {tuple(param.shape)} for {name}; config.json and "
                        "weights disagree"
                    )
                with torch.no_grad():
                    param.copy_(tensor)
                loaded.add(name)
    bar.close()
    missing = sorted(set(params) - loaded)
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
) -> CausalLM:
    """Load the causal LM of a local HF directory onto ``device`` in ``dtype``."""
    path = Path(path)
    cls, config = load_config(path)
    files = checkpoint_files(path)
    quant_config = config.checkpoint_quant_config
    if not quantizer.claims(quant_config):
        method = (quant_config or {}).get("quant_method") or (quant_config or {}).get("quant_algo")
        raise ValueError(
            f"quantizer {type(quantizer).__name__} does not claim the checkpoint {path} "
            f"({'quantized: ' + str(method or quant_config) if quant_config else 'unquantized'}); "
            "select the quantizer made for it (`hinge plugins` lists them) or quantizer=auto"
        )
    with torch.device(device):
        model = cls(config, quantizer=quantizer, dtype=dtype, deterministic=deterministic)
    load_weights(model, files, progress=progress, quantizer=quantizer)
    for module in model.modules():
        if isinstance(module, Linear):
            quantizer.process_weights_after_loading(module)
    model.eval()
    model.requires_grad_(False)
    return model
