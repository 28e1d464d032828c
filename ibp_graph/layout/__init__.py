"""The row layout every codec shares, at the bottom of the package (it imports no codec).

``errors`` (what codecs raise), ``dtypes`` (supported dtypes, row bytes), ``bitstream``
(numba intrinsics, the bit stream, the parallel switch), ``rows`` (offsets, tail padding,
the condensed-row gather), ``tensor`` (CompressedTensor, output buffers), ``format``
(the serialized container).
"""
from .dtypes import SUPPORTED_DTYPES, dtype_from_name, dtype_name
from .errors import CodecError, CodecMismatchError, CorruptPayloadError
from .format import FORMAT_VERSION
from .rows import PAYLOAD_TAIL, gather_condensed_rows
from .tensor import CompressedTensor, check_out

__all__ = [
    "CodecError", "CodecMismatchError", "CompressedTensor", "CorruptPayloadError", "FORMAT_VERSION",
    "PAYLOAD_TAIL", "SUPPORTED_DTYPES", "check_out", "dtype_from_name", "dtype_name",
    "gather_condensed_rows",
]
