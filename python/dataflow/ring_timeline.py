"""A plan's predicted timeline as a PNG: one row per stream (inbound, compute, outbound, top to
bottom), one colour per phase, each bar as long as the stream is busy in that phase; the PNG's
text names the rows, colours and time span."""
import numpy as np

from . import atomic, png

BACKGROUND, GRID = (255, 255, 255), (225, 225, 225)
COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]
STREAMS = ("inbound", "compute", "outbound")
MARGIN, ROW, GAP = 24, 40, 12


def render(phases, step_seconds, width=800):
    """(height, width, 3) uint8 image of phases ([{name, start, inbound, compute, outbound}])."""
    height = 2 * MARGIN + len(STREAMS) * ROW + (len(STREAMS) - 1) * GAP
    image = np.empty((height, width, 3), np.uint8)
    image[:] = BACKGROUND
    left, right = MARGIN, width - MARGIN
    scale = (right - left) / step_seconds if step_seconds > 0 else 0.0
    for tenth in range(11):  # a grid line every tenth of the step
        image[MARGIN // 2:height - MARGIN // 2, left + (right - left) * tenth // 10] = GRID
    for row, stream in enumerate(STREAMS):
        top = MARGIN + row * (ROW + GAP)
        for i, phase in enumerate(phases):
            x0 = left + int(round(phase["start"] * scale))
            x1 = min(right, left + int(round((phase["start"] + phase[stream]) * scale)))
            # phases that run together (an optimizer under the forward) split the row: the
            # first one drawn takes the lower half, the other the upper
            together = [j for j, q in enumerate(phases) if q["start"] == phase["start"]]
            y0, y1 = (top, top + ROW) if len(together) == 1 else \
                ((top + ROW // 2, top + ROW) if i == together[0] else (top, top + ROW // 2))
            if phase[stream] > 0:
                image[y0:y1, x0:max(x1, x0 + 1)] = COLOURS[i % len(COLOURS)]
    return image


def save(path, plan, width=800):
    """Writes plan's timeline to `path` (atomically)."""
    phases = plan.phases
    legend = ", ".join(f"{p['name']} = rgb{COLOURS[i % len(COLOURS)]}" for i, p in enumerate(phases))
    text = {"Title": "predicted step timeline",
            "Description": (f"x: 0..{plan.predicted_step_seconds:.4g} s (grid every tenth); rows top to bottom: "
                            f"{', '.join(STREAMS)} streams, bars = busy time per phase; {legend}")}
    with atomic.replaced_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(png.encode(render(phases, plan.predicted_step_seconds, width), text))
