"""Codecs: what a codec is (base), IBP (ibp), the identity baseline, and the serialized format."""
from .base import (
    Codec,
    CodecError,
    CodecMismatchError,
    CompressedTensor,
    CorruptPayloadError,
    SUPPORTED_DTYPES,
)
from .format import FORMAT_VERSION
from .ibp import IBPCodec
from .identity import IdentityCodec


def codec_from_state_dict(state: dict) -> Codec:
    """Rebuild whichever codec made `state` (by its "codec" entry)."""
    kinds = {IBPCodec.name: IBPCodec, IdentityCodec.name: IdentityCodec}
    name = state.get("codec") if isinstance(state, dict) else None
    if name not in kinds:
        raise CorruptPayloadError(f"state_dict names codec {name!r}; known codecs: {sorted(kinds)}")
    return kinds[name].from_state_dict(state)


__all__ = [
    "Codec", "CodecError", "CodecMismatchError", "CompressedTensor", "CorruptPayloadError",
    "FORMAT_VERSION", "IBPCodec", "IdentityCodec", "SUPPORTED_DTYPES", "codec_from_state_dict",
]
