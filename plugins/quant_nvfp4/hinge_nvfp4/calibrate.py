"""Calibration for ``hinge quantize``: real prompts run through hinge (``hinge.LLM``, unquantized),
recording the largest input magnitude of every linear layer and expert projection, as
ModelOpt's ``max`` calibration of the input quantizers does:

    linear (fused q|k|v, gate|up: one input)  amax |x| over every token
    experts w13 (gate | up)                   amax |x| over the routed tokens (shared by experts)
    experts w2 (down)                         amax |act(x W1^T) * (x W3^T)| over the routed pairs

Prompts: ``--calib FILE`` (a text file, one prompt per non-empty line, or JSON lines with a
``text`` field), else ``--calib-samples N`` pieces of the Python standard library's own source,
which every Python installation carries (no download).
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path
from typing import Any

import torch

from hinge.contracts import LinearSpec, MoESpec

logger = logging.getLogger(__name__)

#: standard-library modules whose source is the default calibration text (plain, varied Python)
STDLIB_MODULES = ("argparse", "collections", "json.decoder", "pathlib", "textwrap", "dataclasses",
                  "functools", "inspect", "logging", "email.message", "csv", "heapq", "string",
                  "difflib", "calendar", "statistics", "fractions", "shutil", "tokenize", "zipfile")


def calibration_prompts(calib: str | None, num_samples: int, chars: int = 1200) -> list[str]:
    """The prompts: the lines of ``calib`` (first ``num_samples``), or standard-library text."""
    if calib is not None:
        path = Path(calib)
        if not path.is_file():
            raise FileNotFoundError(f"calibration file {path} does not exist")
        prompts = []
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                line = str(json.loads(line).get("text", ""))
            if line:
                prompts.append(line)
        if not prompts:
            raise ValueError(f"calibration file {path} holds no prompt (one per line, or JSON lines "
                             "with a 'text' field)")
        return prompts[:num_samples] if num_samples > 0 else prompts
    if num_samples <= 0:
        raise ValueError("--calib-samples must be at least 1 (or give --calib FILE)")
    import importlib

    text = "\n".join(inspect.getsource(importlib.import_module(m)) for m in STDLIB_MODULES)
    step = max(chars, (len(text) - chars) // num_samples)
    return [text[i * step:i * step + chars] for i in range(num_samples)]


class AmaxRecorder:
    """Forward hooks on a hinge model's linear layers and expert sets; ``amax`` maps the module
    name to the largest input magnitude seen (experts: ``<name>.w13`` and ``<name>.w2``)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.amax: dict[str, float] = {}
        self.handles = []
        for name, module in model.named_modules():
            spec = getattr(module, "spec", None)
            if isinstance(spec, LinearSpec):
                self.handles.append(module.register_forward_hook(self._linear_hook(name)))
            elif isinstance(spec, MoESpec):
                self.handles.append(module.register_forward_hook(self._experts_hook(name)))

    def _update(self, key: str, value: torch.Tensor) -> None:
        self.amax[key] = max(self.amax.get(key, 0.0), float(value))

    def _linear_hook(self, name: str):
        def hook(module, args, output):
            if args[0].numel():
                self._update(name, args[0].detach().abs().amax())
        return hook

    def _experts_hook(self, name: str):
        def hook(module, args, output):
            x, topk_ids = args[0].detach(), args[1]
            if not x.numel():
                return
            self._update(f"{name}.w13", x.abs().amax())
            self._update(f"{name}.w2", down_input_amax(module, x, topk_ids))
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def down_input_amax(experts: torch.nn.Module, x: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """Largest |act(x W1^T) * (x W3^T)| over the (token, expert) pairs routed, in x's dtype."""
    from hinge.layers.activation import get_activation

    act = get_activation(experts.spec.activation)
    best = x.new_zeros(())
    for expert in torch.unique(topk_ids).tolist():
        rows = (topk_ids == expert).any(dim=-1)
        gate_up = torch.nn.functional.linear(x[rows], experts.w13_weight[expert])
        width = gate_up.shape[-1] // 2
        best = torch.maximum(best, (act(gate_up[:, :width]) * gate_up[:, width:]).abs().amax())
    return best


def calibrate(src: str | Path, prompts: list[str], *, device: str, dtype: str,
              max_tokens: int = 512, progress: bool = True) -> dict[str, float]:
    """Run ``prompts`` (each cut to ``max_tokens``) through hinge's unquantized model of ``src``;
    the input amax of every linear layer and expert set, by hinge module name."""
    from tqdm.auto import tqdm

    from hinge import LLM, SamplingParams

    llm = LLM(str(src), device=device, dtype=dtype, quantizer="none", progress=False)
    try:
        model: Any = llm.engine.model
        recorder = AmaxRecorder(model)
        params = SamplingParams(max_new_tokens=1, temperature=0.0)
        limit = min(max_tokens, llm.engine.max_model_len - 1)
        for prompt in tqdm(prompts, desc="Calibrating", unit="prompt", disable=not progress):
            ids = llm.tokenizer.encode(prompt)[:limit] or [0]
            llm.generate([ids], params)
        recorder.remove()
    finally:
        llm.close()
    logger.info("calibrated %d modules on %d prompts", len(recorder.amax), len(prompts))
    return recorder.amax
