"""Shared helpers of the dense-model oracle tests (hinge vs transformers)."""

from __future__ import annotations

import torch

from hinge.builtin.no_quant import NoQuantizer
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.models.loader import load_model
from hinge.plugins.specs import BuildContext
from hinge.testing.paged_steps import PagedSteps

ARCHS = ["qwen3", "llama", "qwen3_moe"]

def build_context(deterministic: bool = False, page_size: int = 16) -> BuildContext:
    return BuildContext(device="cpu", dtype=torch.float32, deterministic=deterministic, page_size=page_size)


def load_hinge(path, *, deterministic: bool = False):
    build = build_context(deterministic)
    return load_model(
        path, device="cpu", dtype=torch.float32, quantizer=NoQuantizer(None, build),
        deterministic=deterministic, progress=False,
    )


def paged(model, *, deterministic: bool = False, page_size: int = 16) -> PagedSteps:
    build = build_context(deterministic, page_size)
    return PagedSteps(model, TorchAttentionBackend(None, build), page_size=page_size)


def load_hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


@torch.no_grad()
def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    return hf(torch.tensor([ids])).logits[0].float()


def assert_logits_close(ours: torch.Tensor, ref: torch.Tensor, rel: float = 1e-4) -> None:
    """max |ours - ref| <= rel * max |ref| (the "1e-4 relative" of the issue)."""
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    err = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= rel * scale, f"max abs error {err:.3e} > {rel} * max |ref| {scale:.3e}"
