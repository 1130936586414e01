"""Model building blocks shared by every architecture family."""

from __future__ import annotations

from hinge.layers.embedding import LMHead, VocabEmbedding
from hinge.layers.linear import SINGLE, Linear, TensorParallel
from hinge.layers.mlp import GatedMLP
from hinge.layers.moe import FusedMoE, SparseMoeBlock
from hinge.layers.norm import RMSNorm
from hinge.layers.rotary import RotaryEmbedding

__all__ = [
    "SINGLE", "FusedMoE", "GatedMLP", "LMHead", "Linear", "RMSNorm", "RotaryEmbedding", "SparseMoeBlock",
    "TensorParallel", "VocabEmbedding",
]
