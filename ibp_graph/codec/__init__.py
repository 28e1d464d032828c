"""Codecs, on the CPU: what a codec is (base), IBP (ibp/), EBP (ebp/), the identity baseline,
and fit_codec (auto), which picks one for a tensor. The row layout they share (compressed
tensors, offsets, serialization, errors) is ibp_graph.layout; GPU decoding is ibp_graph.gpu."""
from ..layout.dtypes import SUPPORTED_DTYPES
from ..layout.errors import CodecError, CodecMismatchError, CorruptPayloadError
from ..layout.format import FORMAT_VERSION
from ..layout.tensor import CompressedTensor
from .auto import CODEC_CLASSES, fit_codec
from .base import DEFAULT_SAMPLE_ROWS, Codec
from .ebp import EBPCodec
from .ibp import IBPCodec
from .identity import IdentityCodec

def codec_from_state_dict(state: dict) -> Codec:
    """Rebuild whichever codec made `state` (by its "codec" entry)."""
    name = state.get("codec") if isinstance(state, dict) else None
    if not isinstance(name, str) or name not in CODEC_CLASSES:
        raise CorruptPayloadError(f"state_dict names codec {name!r}; known codecs: {sorted(CODEC_CLASSES)}")
    return CODEC_CLASSES[name].from_state_dict(state)


__all__ = [
    "Codec", "CodecError", "CodecMismatchError", "CompressedTensor", "CorruptPayloadError",
    "DEFAULT_SAMPLE_ROWS", "EBPCodec", "FORMAT_VERSION", "IBPCodec", "IdentityCodec",
    "SUPPORTED_DTYPES", "codec_from_state_dict", "fit_codec",
]

