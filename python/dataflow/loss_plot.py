"""A loss curve as a PNG: light grid, axes, the curve; the value range goes in the PNG's text."""
import numpy as np

from . import atomic, png

BACKGROUND, GRID, AXES, CURVE = (255, 255, 255), (225, 225, 225), (60, 60, 60), (31, 119, 180)
MARGIN = 24


def render(values, width=640, height=400):
    """(height, width, 3) uint8 image of values against their index; y spans [min, max]."""
    image = np.empty((height, width, 3), np.uint8)
    image[:] = BACKGROUND
    left, right, top, bottom = MARGIN, width - MARGIN, MARGIN, height - MARGIN
    for i in range(5):
        y = top + (bottom - top) * i // 4
        image[y, left:right] = GRID
    image[top:bottom + 1, left] = AXES
    image[bottom, left:right + 1] = AXES
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return image
    lo, hi = values.min(), values.max()
    xs = left + (right - left) * (np.arange(values.size) / max(values.size - 1, 1))
    ys = bottom - (bottom - top) * ((values - lo) / (hi - lo) if hi > lo else np.full(values.size, 0.5))
    # sample each segment densely enough to touch every pixel it crosses, then thicken by one pixel
    if values.size == 1:
        px, py = xs, ys
    else:
        steps = int(np.ceil(np.max(np.abs(np.diff(xs)) + np.abs(np.diff(ys))))) + 2
        t = np.linspace(0, 1, steps)[None, :]
        px = (xs[:-1, None] + np.diff(xs)[:, None] * t).ravel()
        py = (ys[:-1, None] + np.diff(ys)[:, None] * t).ravel()
    px, py = np.rint(px).astype(int), np.rint(py).astype(int)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        image[np.clip(py + dy, 0, height - 1), np.clip(px + dx, 0, width - 1)] = CURVE
    return image


def save(path, values, width=640, height=400):
    """Writes the curve to `path` (atomically); the PNG's text says what the axes span."""
    finite = [v for v in values if np.isfinite(v)]
    text = {"Title": "training loss",
            "Description": (f"x: step 1..{len(values)}; y: loss {min(finite):.4f}..{max(finite):.4f}; "
                            f"first {finite[0]:.4f}, last {finite[-1]:.4f}") if finite else "no finite values"}
    with atomic.replaced_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(png.encode(render(values, width, height), text))
