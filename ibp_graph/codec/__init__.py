"""Codecs: what a codec is (base), IBP (ibp), EBP (ebp), the identity baseline, the serialized
format, and fit_codec (auto), which picks one for a tensor."""
from .base import (
    Codec,
    CodecError,
    CodecMismatchError,
    CompressedTensor,
    CorruptPayloadError,
    SUPPORTED_DTYPES,
)
from .ebp import EBPCodec
from .format import FORMAT_VERSION
from .ibp import IBPCodec
from .identity import IdentityCodec


def codec_from_state_dict(state: dict) -> Codec:
    """Rebuild whichever codec made `state` (by its "codec" entry)."""
    kinds = {IBPCodec.name: IBPCodec, EBPCodec.name: EBPCodec, IdentityCodec.name: IdentityCodec}
    name = state.get("codec") if isinstance(state, dict) else None
    if name not in kinds:
        raise CorruptPayloadError(f"state_dict names codec {name!r}; known codecs: {sorted(kinds)}")
    return kinds[name].from_state_dict(state)


__all__ = [
    "Codec", "CodecError", "CodecMismatchError", "CompressedTensor", "CorruptPayloadError",
    "EBPCodec", "FORMAT_VERSION", "IBPCodec", "IdentityCodec", "SUPPORTED_DTYPES",
    "codec_from_state_dict", "fit_codec",
]


def __getattr__(name: str):
    if name == "fit_codec":  # lazily: auto imports every codec's fitting machinery
        from .auto import fit_codec

        return fit_codec
    raise AttributeError(f"module 'ibp_graph.codec' has no attribute {name!r}")
