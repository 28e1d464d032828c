"""Invariant Bit Packing: the codec (codec), its fitting (fit), decode tables (tables), and
the CPU encoder (encode) and decoder (decode)."""
from .codec import IBPCodec

__all__ = ["IBPCodec"]
