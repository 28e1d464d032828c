"""The errors every codec raises for input it cannot accept (all are ValueErrors)."""
from __future__ import annotations


class CodecError(ValueError):
    """Base class of the errors a codec raises for input it cannot accept."""


class CorruptPayloadError(CodecError):
    """A serialized blob or a compressed payload is damaged, truncated or of another format."""


class CodecMismatchError(CodecError):
    """A compressed tensor or state was made by a different codec (or codec state)."""
