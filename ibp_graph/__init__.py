"""ibp-graph: lossless Invariant Bit Packing for feeding GNN node features to the GPU."""
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "fit_codec":  # imported on first use: `import ibp_graph` stays light
        from .codec.auto import fit_codec

        return fit_codec
    raise AttributeError(f"module 'ibp_graph' has no attribute {name!r}")


__all__ = ["__version__", "fit_codec"]
