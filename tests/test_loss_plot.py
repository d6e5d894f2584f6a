"""PNG encoding (parsed back by hand: signature, chunk CRCs, IHDR, pixels) and the loss plot."""
import struct
import zlib

import numpy as np
import pytest

from dataflow import BadArgumentError, loss_plot, png


def parse(data):
    """(width, height, pixels, text) of an 8-bit RGB PNG, checking every CRC."""
    assert data[:8] == png.SIGNATURE
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, interlace) == (8, 2, 0)
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    rows = np.frombuffer(raw, np.uint8).reshape(height, 1 + width * 3)
    assert (rows[:, 0] == 0).all()
    text = dict(body.decode("latin-1").split("\0", 1) for kind, body in chunks if kind == b"tEXt")
    return width, height, rows[:, 1:].reshape(height, width, 3), text


def test_png_round_trip():
    rgb = np.random.default_rng(0).integers(0, 256, (7, 13, 3), dtype=np.uint8)
    width, height, pixels, text = parse(png.encode(rgb, {"Title": "x"}))
    assert (width, height, text) == (13, 7, {"Title": "x"})
    np.testing.assert_array_equal(pixels, rgb)
    with pytest.raises(BadArgumentError):
        png.encode(np.zeros((4, 4), np.uint8))


def test_loss_plot_file(tmp_path):
    losses = list(5.5 * np.exp(-np.arange(50) / 20) + 1.0)
    loss_plot.save(tmp_path / "loss.png", losses, width=320, height=200)
    width, height, pixels, text = parse((tmp_path / "loss.png").read_bytes())
    assert (width, height) == (320, 200)
    assert "first 6.5000, last" in text["Description"]
    curve = np.all(pixels == loss_plot.CURVE, axis=2)
    rows, cols = np.nonzero(curve)
    assert cols.min() <= loss_plot.MARGIN + 1 and cols.max() >= width - loss_plot.MARGIN - 1
    assert rows[cols.argmin()] < rows[cols.argmax()]  # starts high (small row index), ends low
    for c in range(loss_plot.MARGIN, width - loss_plot.MARGIN):  # connected: every column is drawn
        assert curve[:, c].any()


def test_degenerate_curves(tmp_path):
    for values in ([], [3.0], [2.0, 2.0, 2.0], [1.0, float("nan"), 0.5]):
        loss_plot.save(tmp_path / "l.png", values, width=64, height=48)
        assert parse((tmp_path / "l.png").read_bytes())[:2] == (64, 48)
