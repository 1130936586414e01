"""RMSNorm as Hugging Face computes it; batch-invariant when the model is deterministic.

``forward(x, residual)`` is the pre-norm decoder's fused step (sglang's residual passing): it
returns ``(norm(x + residual), x + residual)``. On CUDA outside the deterministic mode that is one
Triton kernel (``hinge.layers.fast_triton.add_rmsnorm``); everywhere else it is the add followed
by the plain norm, the same bits as writing the two out.
"""

from __future__ import annotations

import torch
from torch import nn

from hinge.layers import batch_invariant, fast_triton


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

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """``norm(x)``; with ``residual``, ``(norm(x + residual), x + residual)``."""
        if residual is None:
            return self._norm(x)
        if fast_triton.enabled(x, self.deterministic, invariant=True):  # one program per row
            fused = fast_triton.kernels().add_rmsnorm
            if fused.supports(x, residual, self.weight):
                return fused.add_rmsnorm(x, residual, self.weight, self.eps, self.offset)
        residual = x + residual
        return self._norm(residual), residual

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.deterministic:
            return batch_invariant.rmsnorm(x, self.weight, self.eps, self.offset)
        return batch_invariant.rmsnorm_reference(x, self.weight, self.eps, self.offset)
