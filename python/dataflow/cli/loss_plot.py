"""The loss curve of a training run as a PNG, drawn with matplotlib (no display needed): the raw
training loss faintly, its moving average on top, held-out validation points, the learning rate
on its own axis, labelled axes."""
import numpy as np

from ..io import atomic


def smooth(values, window):
    """Trailing moving average (the first points average what exists so far); NaNs are skipped."""
    values = np.asarray(values, np.float64)
    finite = np.isfinite(values)
    sums = np.cumsum(np.where(finite, values, 0.0))
    counts = np.cumsum(finite)
    lo = np.maximum(np.arange(values.size) - window, -1)
    total = sums - np.where(lo >= 0, sums[np.maximum(lo, 0)], 0.0)
    n = counts - np.where(lo >= 0, counts[np.maximum(lo, 0)], 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def figure(losses, validation=(), title="training loss", first_step=1, marks=(), lrs=()):
    """A matplotlib Figure: losses[i] is the training loss of step first_step + i; validation is
    [(step, loss)]; marks [(step, text)] draw a dashed line after that step, labelled (a resume,
    an lr change); lrs the learning rate of the last len(lrs) steps, on a right-hand axis (its
    schedule explains the loss's shape). Built without pyplot, so nothing global changes and no
    display is touched."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    steps = np.arange(first_step, first_step + len(losses))
    if len(losses):
        window = max(1, len(losses) // 50)
        ax.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="train (per step)")
        ax.plot(steps, smooth(losses, window), color="tab:blue", linewidth=2,
                label=f"train (mean of {window} steps)" if window > 1 else "train")
    if len(validation):
        v = np.asarray(validation, np.float64).reshape(-1, 2)
        ax.plot(v[:, 0], v[:, 1], "o-", color="tab:orange", markersize=5, label="validation (held out)")
    for step, text in marks:
        ax.axvline(step + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.annotate(text, (step + 0.5, 0), xycoords=("data", "axes fraction"), xytext=(3, 3),  # the legend is on top
                    textcoords="offset points", rotation=90, va="bottom", fontsize=8, color="dimgrey")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    if len(lrs):
        lr_ax = ax.twinx()
        lr_ax.plot(steps[len(steps) - len(lrs):], lrs, color="tab:green", linewidth=1, label="learning rate (right)")
        lr_ax.set_ylim(0, max(lrs) * 1.05)
        lr_ax.set_ylabel("learning rate")
        handles += lr_ax.get_legend_handles_labels()[0]
    if handles:
        ax.legend(handles=handles, loc="upper right")
    return fig


def save(path, losses, validation=(), title="training loss", first_step=1, marks=(), lrs=()):
    """Writes figure(...) to `path` as a PNG, atomically (the previous plot survives a failed write)."""
    fig = figure(losses, validation, title, first_step, marks, lrs)
    with atomic.replaced_file(path) as tmp:
        fig.savefig(tmp, format="png")
