"""What every model family shares: ``ModelConfig`` (read from the HF directory) and ``CausalLM``.

Hidden-state numbering follows Hugging Face ``output_hidden_states`` (transformers 5): index 0 is
the token embeddings, index ``i`` the output of decoder layer ``i`` (1-based), and the last index
``num_hidden_layers`` is the *final-normed* hidden state (transformers ties
``hidden_states[-1]`` to ``last_hidden_state``). ``tests/models`` checks this against transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from hinge.contracts import AttentionLayer
    from hinge.forward import ForwardContext, ForwardOutput
    from hinge.plugins.capabilities import GraphVerdict


def read_json(path: Path) -> dict:
    """Read a JSON file, naming the file in any error."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; a Hugging Face model directory needs it")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); re-export the checkpoint") from exc


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


@dataclass
class ModelConfig:
    architectures: list[str]
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    max_position_embeddings: int
    eos_token_ids: list[int] = field(default_factory=list)
    tie_word_embeddings: bool = False
    quantization_config: dict | None = None
    hf_quant_config: dict | None = None  #: modelopt's hf_quant_config.json, when present
    torch_dtype: str | None = None  #: the checkpoint's dtype as config.json states it
    hf_config: Any = None  #: the transformers config of the (text) model
    path: Path | None = None

    @classmethod
    def from_hf(cls, hf_config: Any, raw: dict, path: Path | None = None) -> ModelConfig:
        """Build from a transformers config of the text model and the raw config.json dict."""
        eos = _as_list(getattr(hf_config, "eos_token_id", None)) or _as_list(raw.get("eos_token_id"))
        if path is not None and (path / "generation_config.json").is_file():
            gen = read_json(path / "generation_config.json")
            eos += [t for t in _as_list(gen.get("eos_token_id")) if t not in eos]
        dtype = raw.get("torch_dtype") or raw.get("dtype")
        tie = getattr(hf_config, "tie_word_embeddings", None)
        if tie is None:
            tie = bool(raw.get("tie_word_embeddings", False))
        return cls(
            architectures=list(raw.get("architectures") or []),
            model_type=str(getattr(hf_config, "model_type", raw.get("model_type", ""))),
            vocab_size=int(hf_config.vocab_size),
            hidden_size=int(hf_config.hidden_size),
            num_hidden_layers=int(hf_config.num_hidden_layers),
            max_position_embeddings=int(getattr(hf_config, "max_position_embeddings", 0) or 0),
            eos_token_ids=eos,
            tie_word_embeddings=bool(tie),
            quantization_config=raw.get("quantization_config"),
            hf_quant_config=read_json(path / "hf_quant_config.json")
            if path is not None and (path / "hf_quant_config.json").is_file() else None,
            torch_dtype=str(dtype) if dtype is not None else None,
            hf_config=hf_config,
            path=path,
        )

    @property
    def checkpoint_quant_config(self) -> dict | None:
        """What ``Quantizer.claims`` is asked about: config.json's ``quantization_config``, else
        the hf_quant_config.json dict, else None (unquantized)."""
        return self.quantization_config or self.hf_quant_config


class CausalLM(nn.Module):
    """A decoder-only language model over hinge's paged batch.

    Subclasses build their layers in ``__init__(config, *, quantizer, dtype, deterministic)``,
    fill ``attention_layers`` (one ``AttentionLayer`` per KV layer, ``kv_layer_id`` 0..n-1) and,
    for hybrids, ``recurrent_layers``. Parameter names equal the checkpoint's tensor names unless
    ``checkpoint_param_name`` says otherwise.
    """

    config: ModelConfig

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.attention_layers: list[AttentionLayer] = []
        self.recurrent_layers: list = []

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load_hf_config(cls, path: Path, raw: dict) -> Any:
        """The transformers config of the text model. Composite layouts override this."""
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(path))

    def checkpoint_param_name(self, name: str) -> str | None:
        """Map a checkpoint tensor name to a parameter name; None means ignore the tensor."""
        if name == "lm_head.weight" and self.config.tie_word_embeddings:
            return None
        return name

    # -- running ------------------------------------------------------------------------------

    @classmethod
    def graph_capture_eligibility(cls, phase: str, *, tokens_per_request: tuple[int, ...] = (1,),
                                  kernels: str = "auto") -> GraphVerdict | None:
        """This model's vote on capturing ``phase`` (``hinge.models.graph_votes``): a veto with the
        reason when a layer does host work per step, None for no objection (dense and MoE layers
        are device work only).

        :param tokens_per_request: the query lengths of the decode graphs (``graphs.tokens_per_request``).
        :param kernels: the recurrent kernels' name (``hinge.layers.recurrent_kernels``).
        """
        return None

    def warmup_prompt_lengths(self) -> tuple[int, ...]:
        """Prompt lengths the engine's start-up warm-up runs besides its own (``hinge.engine.
        warmup``), for kernels of this model that take another path above some length (a model
        whose layers take one path at every length needs none)."""
        return ()

    def ensure_positions(self, num_positions: int) -> None:
        """Size position tables (rotary) for ``num_positions`` once, before serving; a model
        without such tables needs nothing."""

    def forward(self, ctx: ForwardContext) -> ForwardOutput:
        """Run one step: write KV, return float32 logits for ``ctx.batch.logits_indices`` and the
        hidden states ``ctx.batch.capture_hidden_layers`` asks for (numbered as module doc says).
        """
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype
