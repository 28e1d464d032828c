"""ibp-graph: lossless Invariant Bit Packing for feeding GNN node features to the GPU."""
__version__ = "0.1.0"
