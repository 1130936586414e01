"""RMSNorm as Hugging Face computes it; batch-invariant when the model is deterministic."""

from __future__ import annotations

import torch
from torch import nn

from hinge.layers import batch_invariant


class RMSNorm(nn.Module):
    """``weight * normalize(x)`` over the last dim, statistics in float32.

    :param offset: 1.0 for the ``(1 + w)`` form (weights stored centred on zero).
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        *,
        dtype: torch.dtype = torch.float32,
        deterministic: bool = False,
        offset: float = 0.0,
    ) -> None:
        super().__init__()
        init = torch.zeros if offset else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype), requires_grad=False)
        self.eps = eps
        self.offset = offset
        self.deterministic = deterministic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.deterministic:
            return batch_invariant.rmsnorm(x, self.weight, self.eps, self.offset)
        return batch_invariant.rmsnorm_reference(x, self.weight, self.eps, self.offset)
