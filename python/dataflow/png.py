"""PNG encoding with zlib and struct (8-bit RGB, no interlace), so plots need no imaging library."""
import struct
import zlib

import numpy as np

from .errors import BadArgumentError

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode(rgb, text=None):
    """PNG bytes of an (height, width, 3) uint8 image; text: {keyword: value} as tEXt chunks."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or 0 in rgb.shape:
        raise BadArgumentError(f"png: expected a non-empty (height, width, 3) uint8 array, got {rgb.shape} {rgb.dtype}")
    height, width, _ = rgb.shape
    # each scanline starts with its filter type; 0 (none) keeps the encoder trivial
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit depth, colour type 2 (RGB)
    text_chunks = b"".join(_chunk(b"tEXt", k.encode("latin-1") + b"\0" + v.encode("latin-1"))
                           for k, v in (text or {}).items())
    return (SIGNATURE + _chunk(b"IHDR", header) + text_chunks + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
            + _chunk(b"IEND", b""))
