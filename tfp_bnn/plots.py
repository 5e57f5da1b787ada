"""Figures for calibration, predictive bands and OOD scores.

matplotlib, a requirement of tfp_bnn, is imported only when a function
runs, so importing this module stays cheap. Each function draws on the
`matplotlib.axes.Axes` passed as `ax=` (a panel of your own figure, pyplot's
included), or on a new `matplotlib.figure.Figure` with its own Agg canvas,
which leaves the global pyplot backend and state untouched; it returns the
Figure. With `path=` it also writes a PNG.

Every function validates its inputs before drawing anything. A PNG is
rendered to a temporary file next to `path` and moved onto `path` with
`os.replace`: `path` is either the complete new PNG or left as it was.

Example:
>>> from matplotlib.figure import Figure
>>> figure = Figure(figsize=(10, 4))
>>> left, right = figure.subplots(1, 2)
>>> labels, probs = np.array([0, 1, 1]), np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
>>> reliability_diagram(labels, probs, ax=left) is figure
True
"""

import os
import secrets
import statistics

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn import metrics

_FIGSIZE = (6.0, 4.5)  # inches
_DPI = 100


def _matplotlib():
    """Returns (Figure, FigureCanvasAgg), or raises ImportError with the fix."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            "tfp_bnn.plots needs matplotlib, a requirement of tfp_bnn that is "
            "missing here: pip install matplotlib."
        ) from err
    return Figure, FigureCanvasAgg


def png_path(path, allow_none=False):
    """`path` as a str if it ends in .png and its directory exists, else ValueError.

    For figure functions outside this module (`tfp_bnn.plots_nodes`, `zoo.run.plots`),
    with `figure_axes` and `save`: they check `path` before drawing anything.

    Args:
        path: a str or path-like ending in .png (any case) whose directory
            exists.
        allow_none: whether None (no file to write) passes through.

    Returns:
        `path` as a str, or None.

    Example:
    >>> png_path("figure.png")
    'figure.png'
    >>> png_path("figure.pdf")
    Traceback (most recent call last):
    ...
    ValueError: `path` must end in .png, got 'figure.pdf'.
    """
    if path is None and allow_none:
        return None
    path = os.fspath(path)
    if not isinstance(path, str) or not path.lower().endswith(".png"):
        raise ValueError(f"`path` must end in .png, got {path!r}.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"The directory of `path` does not exist: {parent!r}.")
    return path


def _check_same_length(**arrays):
    lengths = {name: len(values) for name, values in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"`{name}` {n}" for name, n in lengths.items())
        raise ValueError(f"Mismatched lengths: {shown}.")


def figure_axes(ax=None):
    """The Figure and Axes to draw on: `ax` and its figure, or a new off-screen pair.

    For figure functions outside this module (`tfp_bnn.plots_nodes`, `zoo.run.plots`),
    with `png_path` and `save`. A new Figure has its own Agg canvas, so neither a display
    nor pyplot's global state is involved.

    Args:
        ax: a `matplotlib.axes.Axes`, or None for a new 6 x 4.5 inch Figure with one Axes.

    Returns:
        (figure, ax): the top-level `matplotlib.figure.Figure` holding `ax`, and `ax`.

    Example:
    >>> figure, ax = figure_axes()
    >>> figure_axes(ax)[0] is figure
    True
    """
    if ax is not None:
        check.axes("ax", ax)
        # An Axes of a SubFigure has the SubFigure as `.figure`; its `.figure` is the
        # top-level Figure (itself for a Figure), the one that can be saved.
        return ax.figure.figure, ax
    Figure, FigureCanvasAgg = _matplotlib()
    figure = Figure(figsize=_FIGSIZE, dpi=_DPI)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def save(figure, path):
    """Writes `figure` to the PNG `path` atomically and returns `figure`.

    The PNG is written to a temporary name next to `path` and renamed onto
    it, so `path` is either the complete new PNG or left as it was. Works
    for any Figure, pyplot's included (PNG output renders through Agg).

    Args:
        figure: a `matplotlib.figure.Figure`.
        path: a str or path-like ending in .png whose directory exists.

    Returns:
        `figure`.

    Example:
    >>> import os, tempfile
    >>> figure, ax = figure_axes()
    >>> _ = ax.plot([0, 1], [0, 1])
    >>> path = os.path.join(tempfile.mkdtemp(), "line.png")
    >>> save(figure, path) is figure, os.path.getsize(path) > 0
    (True, True)
    """
    path = png_path(path)
    if not callable(getattr(figure, "savefig", None)):
        raise ValueError(f"`figure` must be a matplotlib Figure, got {type(figure).__name__}.")
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    try:
        # "xb" creates the file with the usual umask permissions and never
        # overwrites someone else's file.
        with open(temporary, "xb") as stream:
            figure.savefig(stream, format="png", dpi="figure")
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return figure


def _finish(figure, path):
    """`figure`, written to `path` first when a path is given."""
    return figure if path is None else save(figure, path)


def reliability_diagram(labels, probs, path=None, num_bins: int = 15, title=None, *, ax=None):
    """Draws a reliability diagram: accuracy per confidence bin vs the diagonal.

    Bars show the accuracy of each non-empty bin of `metrics.reliability_curve`
    (right-closed equal-width bins); a perfectly calibrated model follows the
    dashed diagonal. The legend gives the ECE (Guo et al. 2017).

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        path: optional PNG to write; must end in .png, its directory must exist.
        num_bins: number of confidence bins, an int >= 1.
        title: optional title of the Axes.
        ax: optional `matplotlib.axes.Axes` to draw on; None draws on a new Figure.

    Returns:
        The `matplotlib.figure.Figure` drawn on.

    Example:
    >>> import os, tempfile
    >>> y_test = np.array([0, 1, 1, 0])
    >>> probs = np.array([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.3, 0.7]])
    >>> path = os.path.join(tempfile.mkdtemp(), "reliability.png")
    >>> figure = reliability_diagram(y_test, probs, path)
    >>> figure.axes[0].get_ylabel(), os.path.exists(path)
    ('accuracy', True)
    """
    path = png_path(path, allow_none=True)
    check.axes("ax", ax)
    curve = metrics.reliability_curve(labels, probs, num_bins)
    ece = metrics.expected_calibration_error(labels, probs, num_bins)

    figure, ax = figure_axes(ax)
    filled = curve.counts > 0
    widths = np.diff(curve.edges)
    ax.bar(curve.edges[:-1][filled], curve.accuracy[filled], width=widths[filled],
           align="edge", edgecolor="black", alpha=0.8, label=f"accuracy (ECE = {ece:.3f})")
    ax.plot([0.0, 1.0], [0.0, 1.0], "k--", label="perfect calibration")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title(title if title is not None else "Reliability diagram")
    ax.legend(loc="upper left")
    return _finish(figure, path)


def regression_band(x, y, mean, std, path=None, levels=(0.5, 0.95), x_train=None, y_train=None,
                    title=None, *, ax=None):
    """Draws a 1-D regression plot with central Gaussian predictive bands.

    For each level l the band is mean +/- z std with z = Phi^-1(0.5 + l/2),
    the central interval holding probability l under N(mean, std^2) (z = 1.96
    for 0.95). Points are drawn sorted by x. All values are drawn as given:
    pass them in the data's units (e.g. `prediction.rescale(shift, scale)`
    of a model trained on standardised targets).

    Args:
        x: inputs, 1-D, length n.
        y: observed targets at `x`, 1-D, length n.
        mean: predictive means at `x`, 1-D, length n.
        std: predictive standard deviations at `x`, 1-D, length n, >= 0.
        path: optional PNG to write; must end in .png, its directory must exist.
        levels: central probabilities of the bands, each in (0, 1).
        x_train: optional training inputs, drawn as distinct markers.
        y_train: training targets; given exactly when `x_train` is.
        title: optional title of the Axes.
        ax: optional `matplotlib.axes.Axes` to draw on; None draws on a new Figure.

    Returns:
        The `matplotlib.figure.Figure` drawn on.

    Example:
    >>> x = np.linspace(-1.0, 1.0, 20)
    >>> mu, sigma = np.sin(3 * x), 0.1 + 0.2 * np.abs(x)
    >>> figure = regression_band(x, mu + 0.05, mu, sigma, x_train=x[::4], y_train=mu[::4])
    >>> [line.get_label() for line in figure.axes[0].lines]
    ['predictive mean']
    """
    path = png_path(path, allow_none=True)
    check.axes("ax", ax)
    x, y = check.vector("x", x), check.vector("y", y)
    mean, std = check.vector("mean", mean), check.vector("std", std)
    _check_same_length(x=x, y=y, mean=mean, std=std)
    if np.any(std < 0):
        raise ValueError(f"`std` must be >= 0, got {float(std[std < 0][0])!r}.")
    levels = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    if levels.ndim != 1 or levels.size == 0 or not np.all((levels > 0) & (levels < 1)):
        raise ValueError(f"`levels` must be probabilities in (0, 1), got {levels.tolist()}.")
    if (x_train is None) != (y_train is None):
        raise ValueError("Pass both `x_train` and `y_train`, or neither.")
    if x_train is not None:
        x_train, y_train = check.vector("x_train", x_train), check.vector("y_train", y_train)
        _check_same_length(x_train=x_train, y_train=y_train)
    order = np.argsort(x, kind="stable")
    x, y, mean, std = x[order], y[order], mean[order], std[order]
    normal = statistics.NormalDist()
    half_widths = {float(level): normal.inv_cdf(0.5 + level / 2) for level in levels}

    figure, ax = figure_axes(ax)
    # Widest band first so the narrower, darker ones stay visible on top.
    for level in sorted(half_widths, reverse=True):
        z = half_widths[level]
        ax.fill_between(x, mean - z * std, mean + z * std, color="C0",
                        alpha=0.15 + 0.25 * (1 - level), linewidth=0,
                        label=f"{100 * level:g}% band")
    ax.plot(x, mean, color="C0", label="predictive mean")
    ax.scatter(x, y, s=8, color="C1", label="data")
    if x_train is not None:
        ax.scatter(x_train, y_train, s=14, marker="x", color="black", label="training data")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title if title is not None else "Predictive distribution")
    ax.legend(loc="best")
    return _finish(figure, path)


def uncertainty_histograms(scores_in, scores_out, path=None, score_name="predictive entropy",
                           bins: int = 30, *, ax=None):
    """Draws overlaid histograms of an OOD score on in- and out-of-distribution data.

    Both histograms share bin edges and are normalised to densities, so sets
    of different sizes compare. The title gives the AUROC of the score for
    telling OOD inputs (positives, higher score) from in-distribution ones.

    Args:
        scores_in: scores of in-distribution inputs, 1-D, finite, non-empty.
        scores_out: scores of out-of-distribution inputs, 1-D, finite, non-empty.
        path: optional PNG to write; must end in .png, its directory must exist.
        score_name: label of the x axis.
        bins: number of shared histogram bins, an int >= 1.
        ax: optional `matplotlib.axes.Axes` to draw on; None draws on a new Figure.

    Returns:
        The `matplotlib.figure.Figure` drawn on.

    Example:
    >>> entropy_test, entropy_ood = np.random.rand(100) * 0.5, 0.3 + np.random.rand(50)
    >>> figure = uncertainty_histograms(entropy_test, entropy_ood, bins=10)
    >>> len(figure.axes[0].patches)   # 10 bars per set
    20
    """
    path = png_path(path, allow_none=True)
    check.axes("ax", ax)
    area = metrics.auroc(scores_in, scores_out)
    scores_in, scores_out = np.asarray(scores_in, np.float64), np.asarray(scores_out, np.float64)
    bins = check.integer("bins", bins)
    edges = np.histogram_bin_edges(np.concatenate([scores_in, scores_out]), bins=bins)

    figure, ax = figure_axes(ax)
    ax.hist(scores_in, bins=edges, density=True, alpha=0.5, color="C0",
            label=f"in-distribution (n = {scores_in.size})")
    ax.hist(scores_out, bins=edges, density=True, alpha=0.5, color="C3",
            label=f"out-of-distribution (n = {scores_out.size})")
    ax.set_xlabel(score_name)
    ax.set_ylabel("density")
    ax.set_title(f"{score_name}: AUROC = {area:.3f}")
    ax.legend(loc="best")
    return _finish(figure, path)
