"""ibp-graph: lossless Invariant Bit Packing for feeding GNN node features to the GPU."""
__version__ = "0.1.0"


def decode(codec, ct, device=None):
    """Decode a CompressedTensor made by `codec` on `device` (default: where `ct` is).

    One call for either side: a CPU device decodes with the codec (``codec.decode``), a
    CUDA device with the GPU decoders (``ibp_graph.gpu.decode``, imported on first use).
    """
    import torch

    target = torch.device(device) if device is not None else ct.device
    if target.type == "cuda":
        from . import gpu

        return gpu.decode(codec, ct, device=target)
    if target.type != "cpu":
        raise ValueError(f"device={device!r} is not accepted; use 'cpu', 'cuda' or 'cuda:N'")
    if ct.device.type != "cpu":
        ct = ct.to("cpu")
    return codec.decode(ct)


def __getattr__(name: str):
    if name == "fit_codec":  # imported on first use: `import ibp_graph` stays light
        from .codec.auto import fit_codec

        return fit_codec
    raise AttributeError(f"module 'ibp_graph' has no attribute {name!r}")


__all__ = ["__version__", "decode", "fit_codec"]
