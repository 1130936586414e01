"""Batch-invariant kernels in Triton, used by ``hinge.layers.batch_invariant`` for CUDA tensors.

Imported only when a CUDA tensor asks (Triton comes with torch's CUDA wheels; it is not a
dependency of hinge). Each kernel fixes its tiling from the shapes that do not change within a
model (hidden size, weight shape, vocabulary) and never from the number of rows, and reduces in
one fixed order, so a row's bits are the same alone or in a batch of any size.
"""

from __future__ import annotations

from hinge.layers.batch_invariant_triton.matmul import linear, matmul_config
from hinge.layers.batch_invariant_triton.rmsnorm import rmsnorm
from hinge.layers.batch_invariant_triton.softmax import log_softmax, softmax

__all__ = ["linear", "log_softmax", "matmul_config", "rmsnorm", "softmax"]
