"""The loss plot: a matplotlib figure with labelled axes, tick values, a title, the raw and smoothed
training curves and the validation points, saved as a PNG (read back with Pillow)."""
import numpy as np
import pytest

from dataflow.cli import loss_plot

Image = pytest.importorskip("PIL.Image")


def test_smoothing_is_a_trailing_mean_that_skips_nans():
    np.testing.assert_allclose(loss_plot.smooth([1, 2, 3, 4, 5], 3), [1, 1.5, 2, 3, 4])
    np.testing.assert_allclose(loss_plot.smooth([4, np.nan, 2], 3), [4, 4, 3])
    assert np.isnan(loss_plot.smooth([np.nan, 1.0], 1)[0])


def test_figure_is_labelled_and_holds_the_data():
    losses = list(5.5 * np.exp(-np.arange(200) / 60) + 1.0 + 0.1 * np.sin(np.arange(200)))
    validation = [(50, 4.0), (100, 3.0), (200, 2.2)]
    fig = loss_plot.figure(losses, validation, title="run: preset tiny", first_step=11)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "optimizer step" and "loss" in ax.get_ylabel() and ax.get_title() == "run: preset tiny"
    raw, smooth, val = ax.get_lines()
    np.testing.assert_array_equal(raw.get_xdata(), np.arange(11, 211))
    np.testing.assert_array_equal(raw.get_ydata(), losses)
    assert np.ptp(np.diff(smooth.get_ydata()[10:])) < np.ptp(np.diff(losses[10:]))  # smoother than the raw curve
    np.testing.assert_array_equal(val.get_xdata(), [50, 100, 200])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train (per step)", "train (mean of 4 steps)",
                                                                    "validation (held out)"]
    fig.canvas.draw()  # tick labels exist once drawn
    assert len([t for t in ax.get_xticklabels() if t.get_text()]) >= 3
    assert len([t for t in ax.get_yticklabels() if t.get_text()]) >= 3


def test_saved_png(tmp_path):
    loss_plot.save(tmp_path / "loss.png", [3.0, 2.5, 2.0], [(3, 2.2)])
    with Image.open(tmp_path / "loss.png") as image:
        assert image.format == "PNG" and image.size == (800, 500)
        pixels = np.asarray(image.convert("RGB"))
    assert (pixels < 128).any() and (pixels == 255).all(axis=2).mean() > 0.5  # text and lines on white


@pytest.mark.parametrize("values", [[], [3.0], [2.0, 2.0, 2.0], [1.0, float("nan"), 0.5]])
def test_degenerate_curves(tmp_path, values):
    loss_plot.save(tmp_path / "l.png", values)
    with Image.open(tmp_path / "l.png") as image:
        assert image.size == (800, 500)


def test_learning_rate_is_drawn_on_its_own_axis_for_the_steps_that_kept_it():
    lrs = [1e-3 * (1 - s / 40) for s in range(20)]  # a resumed older run: the lr of its last 20 of 30 steps
    fig = loss_plot.figure([3.0] * 30, [(30, 2.9)], title="t", lrs=lrs)
    ax, lr_ax = fig.axes
    (line,) = lr_ax.get_lines()
    np.testing.assert_array_equal(line.get_xdata(), np.arange(11, 31))
    np.testing.assert_array_equal(line.get_ydata(), lrs)
    assert lr_ax.get_ylabel() == "learning rate" and lr_ax.get_ylim()[0] == 0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train (per step)", "train",
                                                                    "validation (held out)", "learning rate (right)"]


def test_marks_show_where_resumed_runs_began():
    fig = loss_plot.figure([3.0] * 30, [], title="t", marks=[(10, "resumed"), (20, "resumed, lr 0.002 -> 0.0005")])
    (ax,) = fig.axes
    lines = ax.get_lines()[2:]  # after the raw and smoothed training curves
    assert [tuple(line.get_xdata()) for line in lines] == [(10.5, 10.5), (20.5, 20.5)]
    assert [t.get_text() for t in ax.texts] == ["resumed", "resumed, lr 0.002 -> 0.0005"]
