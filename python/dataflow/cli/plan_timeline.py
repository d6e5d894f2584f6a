"""A plan's predicted timeline drawn with matplotlib: one row per stream (inbound, compute,
outbound, top to bottom, and disk below them when the plan has a disk tier), one colour per phase, each bar as long as the stream is busy in that
phase, on a labelled time axis with a legend of the phases."""
from ..io import atomic

STREAMS = ("inbound", "compute", "outbound")


def seconds_unit(seconds):
    """(unit, scale) that show `seconds` without leading zeros: a small model's step is microseconds."""
    if seconds >= 1 or seconds <= 0:
        return "s", 1.0
    return ("ms", 1e3) if seconds >= 1e-3 else ("µs", 1e6)


def streams(phases):
    """The rows drawn, top to bottom: STREAMS, and "disk" when a phase uses the disk tier."""
    return STREAMS + (("disk",) if any(p.get("disk", 0) > 0 for p in phases) else ())


def bars(phases):
    """{stream: [(phase index, start, seconds, y, height)]}: the busy part of each phase on each
    stream's row (row r spans y in [r - 0.4, r + 0.4], inbound at the top). Phases that start
    together and are both busy on a stream (an optimizer under the forward) split its row: the
    first takes the lower half."""
    out, rows = {}, streams(phases)
    for row, stream in enumerate(rows):
        y = len(rows) - 1 - row
        out[stream] = []
        for i, phase in enumerate(phases):
            if phase.get(stream, 0) <= 0:
                continue
            together = [j for j, q in enumerate(phases) if q["start"] == phase["start"] and q.get(stream, 0) > 0]
            y0, height = (y - 0.4, 0.8) if len(together) == 1 else (y - 0.4 if i == together[0] else y, 0.4)
            out[stream].append((i, phase["start"], phase[stream], y0, height))
    return out


def figure(phases, step_seconds, title="predicted step timeline"):
    """A matplotlib Figure of the phases ([{name, start, inbound, compute, outbound[, disk]}]), built
    without pyplot (nothing global changes, no display)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    fig = Figure(figsize=(10, 3.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(phases))]
    unit, scale = seconds_unit(step_seconds)
    for stream_bars in bars(phases).values():
        for i, start, seconds, y0, height in stream_bars:
            ax.broken_barh([(start * scale, seconds * scale)], (y0, height), color=colours[i])
    rows = streams(phases)
    ax.set_yticks(range(len(rows)), labels=list(reversed(rows)))
    ax.set_xlim(0, step_seconds * scale if step_seconds > 0 else 1.0)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel(f"time within the step ({unit})")
    ax.set_ylabel("stream")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=colours[i], label=p["name"]) for i, p in enumerate(phases)],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), title="phase")
    return fig


def save(path, plan):
    """Writes plan's timeline to `path` as a PNG, atomically."""
    unit, scale = seconds_unit(plan.predicted_step_seconds)
    fig = figure(plan.phases, plan.predicted_step_seconds, f"predicted step timeline: "
                 f"{plan.predicted_step_seconds * scale:.3g} {unit}, {plan.tokens_per_second:,.0f} tok/s")
    with atomic.replaced_file(path) as tmp:
        fig.savefig(tmp, format="png")
