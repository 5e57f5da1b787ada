"""Tests of tfp_bnn.plots: what is drawn, on which Axes, PNG output, validation, atomic writes."""

import os
import statistics
import sys

import numpy as np
import pytest

from tfp_bnn import metrics
from tfp_bnn import plots

matplotlib_image = pytest.importorskip("matplotlib.image")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# plots draws every figure at 6 x 4.5 inches, 100 dpi.
EXPECTED_PIXELS = (450, 600)


def _classification(seed=0, n=200, num_classes=3):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(num_classes, 0.5), size=n)
    labels = rng.integers(0, num_classes, size=n)
    return labels, probs


def _regression(seed=0, n=60):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, size=n)
    mean = np.sin(x)
    std = 0.1 + 0.1 * np.abs(x)
    return x, mean + std * rng.normal(size=n), mean, std


def _ood_scores(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, size=150), rng.normal(1.5, 1.0, size=90)


def _call(kind, path=None, **overrides):
    if kind == "reliability":
        labels, probs = _classification()
        kwargs = dict(labels=labels, probs=probs, path=path, num_bins=10)
        function = plots.reliability_diagram
    elif kind == "band":
        x, y, mean, std = _regression()
        kwargs = dict(x=x, y=y, mean=mean, std=std, path=path,
                      x_train=x[:10], y_train=y[:10] + 0.5)
        function = plots.regression_band
    else:
        scores_in, scores_out = _ood_scores()
        kwargs = dict(scores_in=scores_in, scores_out=scores_out, path=path)
        function = plots.uncertainty_histograms
    kwargs.update(overrides)
    return function(**kwargs)


KINDS = ["reliability", "band", "histograms"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_function_writes_a_readable_png(kind, tmp_path):
    path = tmp_path / f"{kind}.png"
    returned = _call(kind, path)
    assert isinstance(returned, Figure) and len(returned.axes) == 1
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    image = matplotlib_image.imread(path)
    assert image.shape[:2] == EXPECTED_PIXELS
    # Something was drawn: the image is not one flat colour.
    assert image[..., :3].std() > 0.05
    assert sorted(os.listdir(tmp_path)) == [f"{kind}.png"]  # no temporary left behind


def test_reliability_diagram_draws_the_per_bin_accuracy_and_the_ece():
    labels, probs = _classification(1, n=300)
    figure = plots.reliability_diagram(labels, probs, num_bins=8, title="Model A")
    (ax,) = figure.axes
    curve = metrics.reliability_curve(labels, probs, 8)
    filled = curve.counts > 0
    bars = [patch for patch in ax.patches]
    np.testing.assert_allclose([bar.get_height() for bar in bars], curve.accuracy[filled])
    np.testing.assert_allclose([bar.get_x() for bar in bars], curve.edges[:-1][filled])
    ece = metrics.expected_calibration_error(labels, probs, 8)
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert f"accuracy (ECE = {ece:.3f})" in legend
    assert ax.get_title() == "Model A"


def test_regression_band_half_widths_are_normal_quantiles():
    x, y, mean, std = _regression(2)
    figure = plots.regression_band(x, y, mean, std, levels=(0.5, 0.95))
    (ax,) = figure.axes
    bands = {c.get_label(): c for c in ax.collections if c.get_label().endswith("band")}
    assert set(bands) == {"50% band", "95% band"}
    order = np.argsort(x)
    for level, label in [(0.5, "50% band"), (0.95, "95% band")]:
        z = statistics.NormalDist().inv_cdf(0.5 + level / 2)  # 0.674, 1.960
        vertices = bands[label].get_paths()[0].vertices
        upper = np.interp(x[order], *_upper_edge(vertices))
        np.testing.assert_allclose(upper, (mean + z * std)[order], rtol=1e-6, atol=1e-9)
        assert vertices[:, 1].min() == pytest.approx(np.min(mean - z * std))
    assert abs(statistics.NormalDist().inv_cdf(0.975) - 1.959964) < 1e-6
    (line,) = ax.lines
    np.testing.assert_array_equal(line.get_xdata(), x[order])  # drawn sorted by x


def _upper_edge(vertices):
    """(x, y) of the upper boundary of a fill_between polygon."""
    xs, ys = vertices[:, 0], vertices[:, 1]
    unique = np.unique(xs)
    return unique, np.array([ys[xs == value].max() for value in unique])


def test_uncertainty_histograms_share_edges_and_report_the_auroc():
    scores_in, scores_out = _ood_scores(3)
    figure = plots.uncertainty_histograms(scores_in, scores_out, bins=12,
                                          score_name="mutual information")
    (ax,) = figure.axes
    area = metrics.auroc(scores_in, scores_out)
    assert ax.get_title() == f"mutual information: AUROC = {area:.3f}"
    assert ax.get_xlabel() == "mutual information"
    lefts = np.array([patch.get_x() for patch in ax.patches])
    assert lefts.size == 24
    np.testing.assert_allclose(lefts[:12], lefts[12:])  # one set of edges for both


def _panels(columns=2):
    """A Figure of the caller's own, with an Agg canvas and `columns` Axes."""
    figure = Figure(figsize=(4.0 * columns, 3.0), dpi=50)
    FigureCanvasAgg(figure)
    return figure, figure.subplots(1, columns)


@pytest.mark.parametrize("kind", KINDS)
def test_ax_draws_on_the_given_axes_returns_its_figure_and_writes_no_file(kind, tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    figure, (left, right) = _panels()
    right.plot([0, 1], [5, 6], label="mine")
    returned = _call(kind, ax=right)
    assert returned is figure
    assert len(figure.axes) == 2 and not left.has_data()  # nothing on the other panel
    assert right.has_data() and right.get_title()
    assert "mine" in [line.get_label() for line in right.lines]  # the caller's line is kept
    assert os.listdir(tmp_path) == []


def test_ax_output_equals_the_new_figure_output():
    x, y, mean, std = _regression(4)
    own = plots.regression_band(x, y, mean, std).axes[0]
    _, (ax, _) = _panels()
    plots.regression_band(x, y, mean, std, ax=ax)
    for drawn in (own, ax):
        (line,) = drawn.lines
        np.testing.assert_array_equal(line.get_xydata(), own.lines[0].get_xydata())
        assert [c.get_label() for c in drawn.collections] == [
            "95% band", "50% band", "data"]


def test_ax_with_a_path_writes_the_whole_figure(tmp_path):
    figure, (left, right) = _panels()
    _call("reliability", tmp_path / "both.png", ax=left)
    _call("histograms", tmp_path / "both.png", ax=right)
    image = matplotlib_image.imread(tmp_path / "both.png")
    assert image.shape[:2] == (150, 400)  # the caller's 8 x 3 inches at 50 dpi
    assert sorted(os.listdir(tmp_path)) == ["both.png"]


def test_ax_of_a_subfigure_returns_the_top_level_figure(tmp_path):
    figure = Figure()
    FigureCanvasAgg(figure)
    ax = figure.subfigures(1, 2)[1].add_subplot()
    assert _call("band", tmp_path / "sub.png", ax=ax) is figure
    assert (tmp_path / "sub.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "bad, shown",
    [("left", "str"), ("figure", "Figure"), ("both", "ndarray")],
)
def test_a_bad_ax_is_one_value_error_and_draws_nothing(kind, bad, shown, tmp_path):
    figure, (left, right) = _panels()
    ax = {"left": "left", "figure": figure, "both": np.array([left, right])}[bad]
    with pytest.raises(ValueError) as error:
        _call(kind, tmp_path / "figure.png", ax=ax)
    message = str(error.value)
    assert message == f"`ax` must be a matplotlib Axes (e.g. `figure.add_subplot()`) or None, " \
                      f"got {shown}."
    assert "\n" not in message
    assert not left.has_data() and not right.has_data()
    assert os.listdir(tmp_path) == []


def test_invalid_inputs_with_ax_draw_nothing_on_it():
    _, (ax, _) = _panels()
    with pytest.raises(ValueError, match="Mismatched lengths"):
        _call("band", ax=ax, y=np.ones(59))
    assert not ax.has_data() and ax.get_title() == ""


def test_save_writes_any_figure_and_refuses_what_is_not_one(tmp_path):
    figure, (left, _) = _panels()
    left.plot([0, 1], [1, 0])
    assert plots.save(figure, tmp_path / "mine.png") is figure
    assert matplotlib_image.imread(tmp_path / "mine.png").shape[:2] == (150, 400)
    with pytest.raises(ValueError, match="`figure` must be a matplotlib Figure, got Axes"):
        plots.save(left, tmp_path / "axes.png")
    with pytest.raises(ValueError, match=r"end in \.png"):
        plots.save(figure, tmp_path / "mine.pdf")
    assert os.listdir(tmp_path) == ["mine.png"]


def test_figure_axes_gives_a_new_agg_figure_or_the_axes_own():
    figure, ax = plots.figure_axes()
    assert isinstance(figure.canvas, FigureCanvasAgg) and figure.axes == [ax]
    assert tuple(figure.get_size_inches()) == (6.0, 4.5)
    assert plots.figure_axes(ax) == (figure, ax)
    with pytest.raises(ValueError, match="`ax` must be a matplotlib Axes"):
        plots.figure_axes(figure)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_call_leaves_no_file_and_keeps_an_existing_one(kind, tmp_path):
    path = tmp_path / "figure.png"
    bad = {
        "reliability": dict(labels=np.zeros(5, int)),  # 5 labels for 200 rows
        "band": dict(std=np.ones(7)),
        "histograms": dict(scores_out=np.array([0.1, np.nan])),
    }[kind]
    with pytest.raises(ValueError):
        _call(kind, path, **bad)
    assert os.listdir(tmp_path) == []
    path.write_bytes(b"old figure")
    with pytest.raises(ValueError):
        _call(kind, path, **bad)
    assert path.read_bytes() == b"old figure"
    _call(kind, path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert os.listdir(tmp_path) == ["figure.png"]


def test_an_error_while_writing_removes_the_partial_file(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def failing_savefig(self, stream, **kwargs):
        stream.write(PNG_SIGNATURE + b"partial")
        raise RuntimeError("disk full")

    path = tmp_path / "figure.png"
    path.write_bytes(b"old figure")
    monkeypatch.setattr(Figure, "savefig", failing_savefig)
    with pytest.raises(RuntimeError, match="disk full"):
        _call("histograms", path)
    assert path.read_bytes() == b"old figure"
    assert os.listdir(tmp_path) == ["figure.png"]


def test_missing_matplotlib_raises_an_import_error_with_the_install_command(tmp_path,
                                                                              monkeypatch):
    # matplotlib is a requirement of tfp_bnn; an environment without it gets
    # the plain pip command (the `plots` extra is only an alias).
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r"missing here: pip install matplotlib\.$"):
        _call("reliability", tmp_path / "r.png")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "kind, overrides, message",
    [
        ("band", dict(y=np.ones(59)), r"Mismatched lengths.*`x` 60.*`y` 59"),
        ("band", dict(mean=np.full(60, np.inf)), r"`mean` must be finite.*inf at index 0"),
        ("band", dict(std=-np.ones(60)), r"`std` must be >= 0.*-1\.0"),
        ("band", dict(x=np.ones((60, 1))), r"`x` must be 1-D.*\(60, 1\)"),
        ("band", dict(x=[], y=[], mean=[], std=[]), r"`x` is empty"),
        ("band", dict(levels=(0.5, 1.0)), r"`levels`.*\(0, 1\).*1\.0"),
        ("band", dict(y_train=None), r"both `x_train` and `y_train`"),
        ("band", dict(y_train=np.ones(3)), r"`x_train` 10.*`y_train` 3"),
        ("reliability", dict(probs=np.full((200, 3), 0.5)), r"sum to 1"),
        ("reliability", dict(labels=np.zeros(5, int)), r"5 examples but `probs` has 200"),
        ("histograms", dict(scores_in=[]), r"`scores_in` is empty"),
        ("histograms", dict(scores_out=[0.0, np.nan]), r"`scores_out` must be finite"),
        ("histograms", dict(bins=0), r"`bins` must be a positive int, got 0"),
        ("histograms", dict(path="figure.jpg"), r"end in \.png.*figure\.jpg"),
        ("reliability", dict(path="no/such/dir/figure.png"), r"does not exist.*no/such/dir"),
    ],
)
def test_invalid_inputs_raise_value_errors_naming_the_problem(kind, overrides, message,
                                                              tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = overrides.pop("path", tmp_path / "figure.png")
    with pytest.raises(ValueError, match=message):
        _call(kind, path, **overrides)
    assert os.listdir(tmp_path) == []
