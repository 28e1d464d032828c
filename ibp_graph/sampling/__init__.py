"""Neighbour sampling on a CSC graph with PyG NeighborLoader semantics (no pyg-lib needed)."""
from .graph import CSCGraph
from .neighbor import NeighborSampler, SamplerOutput

__all__ = ["CSCGraph", "NeighborSampler", "SamplerOutput"]
