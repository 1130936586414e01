"""Token embedding and LM head (plain weights: never quantized, optionally tied)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hinge.layers import batch_invariant


class VocabEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size, dtype=dtype), requires_grad=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)


class LMHead(nn.Module):
    """Hidden states -> float32 logits. ``tied_to`` shares the embedding's weight parameter."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        dtype: torch.dtype,
        *,
        tied_to: VocabEmbedding | None = None,
        deterministic: bool = False,
    ) -> None:
        super().__init__()
        self.tied = tied_to is not None
        if tied_to is not None:
            self.weight = tied_to.weight
        else:
            self.weight = nn.Parameter(
                torch.empty(vocab_size, hidden_size, dtype=dtype), requires_grad=False
            )
        self.deterministic = deterministic

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.deterministic:
            return batch_invariant.linear(hidden, self.weight).float()
        return F.linear(hidden, self.weight).float()
