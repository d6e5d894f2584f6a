"""Python strings handed to C as NUL-terminated bytes: a NUL inside one would silently cut it
short in C (a signature losing a requirement, two op names colliding), so it is refused here."""
import os

from ._ffi import ffi
from .errors import BadArgumentError


def c_bytes(value, what):
    """A str (or a path) as UTF-8 bytes for C; BadArgumentError naming `what` for other types, a
    NUL character or text that is not encodable."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise BadArgumentError(f"{what} must be a string, got {type(value).__name__}")
    if "\0" in value:
        raise BadArgumentError(f"{what} contains a NUL character at {value.index(chr(0))}, which would cut it "
                               f"short in C: {value!r:.80}")
    try:
        return value.encode()
    except UnicodeEncodeError as e:
        raise BadArgumentError(f"{what} is not valid text: {e}") from None


def c_string(value, what):
    """c_bytes as a char[] cdata that owns its bytes (keep it alive while C reads it)."""
    return ffi.new("char[]", c_bytes(value, what))
