"""Entropy Bit Packing: the codec (codec), its fitting (fit, huffman), state checks (state),
prefix codes (codes), decode tables (tables), gamma counts (stream), and the CPU encoder
(encode) and decoder (decode)."""
from .codec import EBPCodec

__all__ = ["EBPCodec"]
