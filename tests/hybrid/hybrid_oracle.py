"""Checks shared by every hybrid family: hinge vs transformers' own model (its torch fallback)."""

from __future__ import annotations

import torch

PROMPTS = [[3, 17, 45, 8, 91, 22, 5, 60, 33, 12, 7, 70, 41], [9, 14, 2], [50, 51, 52, 53, 54, 55, 56]]


def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def hf_greedy(hf, prompt: list[int], max_new: int) -> list[int]:
    hf.generation_config.eos_token_id = None  # run all max_new tokens; eos is an ordinary token here
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def assert_logits_close(ours: torch.Tensor, ref: torch.Tensor, rtol: float = 1e-4) -> None:
    """Relative to the reference's scale: max |ours - ref| <= rtol * max |ref|."""
    err = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= rtol * scale, f"max abs error {err:.3e} > {rtol} x max |logit| {scale:.3e}"
