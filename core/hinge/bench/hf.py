"""The transformers baseline: batched greedy ``model.generate`` on the same token prompts.

Prompts go in batches of ``batch_size`` with left padding and ``min_new_tokens =
max_new_tokens`` so every request produces exactly ``output_len`` tokens, after a warm-up; model
loading is not timed. ``generate`` streams nothing for a batch, so a request's time to first token
comes from a separate 1-token generate of its batch, which is not counted in the wall time.
For a random-weight run (``build_hf_random``) transformers builds the same configuration with its
own random initialisation: the same shapes and dtype, other values.
"""

from __future__ import annotations

import time
from typing import Any

from hinge.bench.result import BenchResult
from hinge.bench.stats import RequestRecord


def load_hf(model_path: str, *, device: str, dtype: Any) -> Any:
    """transformers' own model for ``model_path``, in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()


def build_hf_random(model_path: str, *, device: str, dtype: Any) -> Any:
    """transformers' model of ``model_path``'s config.json with its own random initialisation,
    built on ``device`` (no checkpoint; the same shapes as hinge's dummy weights, not the same
    values), in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device(device):  # initialised where it runs (an 8B init on the CPU takes minutes)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device).eval()  # a no-op unless something was left behind


def bench_hf(model: Any, prompts: list[list[int]], output_len: int, *, batch_size: int,
             pad_id: int) -> BenchResult:
    """Greedy-generate ``output_len`` tokens for every prompt, ``batch_size`` prompts per call
    (0: all in one batch)."""
    import torch

    device = str(model.device)
    batch_size = batch_size or len(prompts)

    def generate(batch: list[list[int]], new_tokens: int) -> list[list[int]]:
        width = max(map(len, batch))
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=pad_id)
        return out[:, width:].tolist()

    generate([prompts[0][:8]], 4)  # warm-up
    outputs: list[list[int]] = []
    records: list[RequestRecord] = []
    wall = 0.0
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i:i + batch_size]
        prefill = _timed(device, lambda b=batch: generate(b, 1))[1]
        batch_out, full = _timed(device, lambda b=batch: generate(b, output_len))
        for prompt, out in zip(batch, batch_out, strict=True):
            # every request of the batch was sent at 0 and waited for the batches before it
            records.append(RequestRecord(input_len=len(prompt), output_len=len(out),
                                         ttft_s=wall + min(prefill, full), latency_s=wall + full))
        wall += full
        outputs.extend(batch_out)
    return BenchResult("transformers", records, wall, outputs=outputs,
                       torch_threads=torch.get_num_threads(),
                       note=f"batched model.generate (greedy, KV cache, {batch_size} prompts per "
                       "call, left padding); TTFT from a separate 1-token generate of each batch")


def _timed(device: str, fn: Any) -> tuple[Any, float]:
    _sync(device)
    start = time.perf_counter()
    result = fn()
    _sync(device)
    return result, time.perf_counter() - start


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
