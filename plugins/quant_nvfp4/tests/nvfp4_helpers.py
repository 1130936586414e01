"""Shared by the nvfp4 tests: the fixtures, a dequantized oracle checkpoint, logits of a model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from hinge.plugins import BuildContext
from hinge_nvfp4 import format as fp4
from hinge_nvfp4.options import NVFP4Options
from hinge_nvfp4.quantizer import NVFP4Quantizer

FIXTURES = Path(__file__).parent / "fixtures"
SCALE_SUFFIXES = (".weight_scale", ".weight_scale_2", ".input_scale", ".k_scale", ".v_scale")


def build(device: str = "cpu", dtype=torch.float32, deterministic: bool = False) -> BuildContext:
    return BuildContext(device=device, dtype=dtype, deterministic=deterministic, page_size=16)


def nvfp4(dtype=torch.float32, deterministic: bool = False, **options) -> NVFP4Quantizer:
    return NVFP4Quantizer(NVFP4Options(**options), build(dtype=dtype, deterministic=deterministic))


def nvfp4_mlp(hidden: int, inter: int, kernel: str = "mma", device: str = "cuda", seed: int = 0,
              quantizer: NVFP4Quantizer | None = None):
    """A bf16 SwiGLU ``GatedMLP`` over nvfp4 (``kernel``) with seeded random NVFP4 weights."""
    from hinge.layers.mlp import GatedMLP
    from hinge.testing import load_linear

    q = quantizer or NVFP4Quantizer(NVFP4Options(kernel=kernel), build(device=device, dtype=torch.bfloat16))
    with torch.device(device):
        mlp = GatedMLP(hidden, inter, "silu", q, torch.bfloat16, "mlp")
    gen = torch.Generator().manual_seed(seed)
    for layer, sizes in ((mlp.gate_up_proj, (inter, inter)), (mlp.down_proj, (hidden,))):
        shards = []
        for size in sizes:
            w = torch.randn(size, layer.in_features, generator=gen) / layer.in_features ** 0.5
            packed, scales, scale_2 = fp4.quantize_weight(w.to(torch.bfloat16))
            shards.append({"weight": packed, "weight_scale": scales, "weight_scale_2": scale_2,
                           "input_scale": fp4.global_scale(torch.tensor(4.0))})
        load_linear(layer, shards)
    return mlp


def plain(dtype=torch.float32):
    from hinge.plugins.manager import get_plugin_manager

    spec = get_plugin_manager().get_component("quantizer", "none").spec
    return spec.build(None, build(dtype=dtype))


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_tensors(path: Path, edit) -> None:
    """Rewrite ``path/model.safetensors`` as ``edit(tensors)`` returns it."""
    tensors = edit(load_file(path / "model.safetensors"))
    save_file(tensors, str(path / "model.safetensors"))


def dequantized_oracle(src: Path, dst: Path) -> Path:
    """The NVFP4 checkpoint ``src`` with every quantized weight dequantized (float32) and no
    quantization config: an independent way to run the same numbers through the plain path."""
    tensors = load_file(src / "model.safetensors")
    out = {}
    for name, t in tensors.items():
        if name.endswith(".weight") and t.dtype == torch.uint8:
            p = name[: -len(".weight")]
            out[name] = fp4.dequantize(t, tensors[p + ".weight_scale"], tensors[p + ".weight_scale_2"])
        elif not name.endswith(SCALE_SUFFIXES):
            out[name] = t.float()
    dst.mkdir(parents=True)
    save_file(out, str(dst / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    config.pop("quantization_config", None)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@torch.no_grad()
def logits(model, prompts: list[list[int]]) -> torch.Tensor:
    """Every position's logits of each prompt (float32), one request each, concatenated."""
    from hinge.builtin.torch_attention import TorchAttentionBackend
    from hinge.testing.paged_steps import PagedSteps

    steps = PagedSteps(model, TorchAttentionBackend(None, build(dtype=model.dtype)))
    return torch.cat([steps.step([(i, p)], all_logits=True).logits.float() for i, p in enumerate(prompts)])


def kl_and_top1(test: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """Mean KL(ref || test) per position and the fraction of positions with the same argmax."""
    lp, lq = ref.log_softmax(-1), test.log_softmax(-1)
    kl = (lp.exp() * (lp - lq)).sum(-1).mean()
    return float(kl), float((test.argmax(-1) == ref.argmax(-1)).float().mean())


def replay_matches_eager(call, static: torch.Tensor) -> bool:
    """``call()`` captured in a CUDA graph, ``static`` (its input) refilled with new values, the
    graph replayed: whether its output equals ``call()`` run eagerly on the new values."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    static.copy_(torch.randn_like(static))
    graph.replay()
    torch.cuda.synchronize()
    return torch.equal(captured, call())
