"""Model building blocks shared by every architecture family."""

from __future__ import annotations

from hinge.layers.embedding import LMHead, VocabEmbedding
from hinge.layers.linear import GatedMLP, Linear
from hinge.layers.moe import SparseMoeBlock
from hinge.layers.norm import RMSNorm
from hinge.layers.rotary import RotaryEmbedding

__all__ = ["GatedMLP", "LMHead", "Linear", "RMSNorm", "RotaryEmbedding", "SparseMoeBlock", "VocabEmbedding"]
