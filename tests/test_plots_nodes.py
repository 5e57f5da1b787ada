"""Tests of tfp_bnn.plots_nodes: the node-posterior corner plot, its data, its Axes, validation."""

import os

import keras
import numpy as np
import pytest

from tfp_bnn import plots_nodes
from tfp_bnn.layers.node.node_conv2d import NodeConv2D
from tfp_bnn.layers.node.node_dense import NodeDense

matplotlib_image = pytest.importorskip("matplotlib.image")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXPECTED_PIXELS = (450, 600)  # tfp_bnn.plots draws at 6 x 4.5 inches, 100 dpi


def _bimodal_layer(posterior="gaussian"):
    """Input nodes of two well separated components: z ~ N(0.5, 0.05^2) or N(1.5, 0.05^2)."""
    layer = NodeDense(2, noise="both", num_components=2, posterior=posterior, kl_weight=1.0,
                      seed=0)
    layer.build((None, 3))
    layer.input_loc.assign(np.array([[0.5] * 3, [1.5] * 3], "float32"))
    layer.input_rho.assign(np.full((2, 3), np.log(np.expm1(0.05)), "float32"))
    return layer


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_writes_a_readable_png_and_nothing_else(posterior, tmp_path):
    path = tmp_path / "nodes.png"
    returned = plots_nodes.node_posterior_marginals(_bimodal_layer(posterior), path, dims=(0, 2),
                                                    num_samples=500)
    assert isinstance(returned, Figure)
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    image = matplotlib_image.imread(path)
    assert image.shape[:2] == EXPECTED_PIXELS
    assert image[..., :3].std() > 0.05
    assert os.listdir(tmp_path) == ["nodes.png"]


def _marginal_counts(joint):
    """(joint Axes, top histogram bars, right histogram bars) of a drawn corner plot."""
    top, right = joint.child_axes
    top_bars = [(p.get_x(), p.get_height()) for p in top.patches]
    right_bars = [(p.get_y(), p.get_width()) for p in right.patches]
    return joint, top_bars, right_bars


def test_mixture_shows_both_modes_and_a_component_only_its_own():
    layer = _bimodal_layer()
    mixture = plots_nodes.node_posterior_marginals(layer, num_samples=1000)
    one = plots_nodes.node_posterior_marginals(layer, num_samples=1000, component=1)
    for figure, lows, highs in ((mixture, 0.5, 0.5), (one, 0.0, 1.0)):
        (joint,) = figure.axes
        joint, top, right = _marginal_counts(joint)
        for bars in (top, right):
            edges = np.array([edge for edge, _ in bars])
            heights = np.array([height for _, height in bars])
            width = edges[1] - edges[0]
            mass = heights * width  # density histograms: mass sums to 1
            assert mass.sum() == pytest.approx(1.0, rel=1e-6)
            assert mass[edges + width <= 1.0].sum() == pytest.approx(lows, abs=1e-9)
            assert mass[edges >= 1.0].sum() == pytest.approx(highs, abs=1e-9)
        # The 2-D histogram holds every sample.
        counts = joint.collections[0].get_array()
        assert float(np.sum(counts)) == 1000
        assert joint.get_xlabel() == "z[0]" and joint.get_ylabel() == "z[1]"
    assert "mixture" in mixture.axes[0].child_axes[0].get_title()
    assert "component 1" in one.axes[0].child_axes[0].get_title()


def test_ax_takes_the_joint_histogram_and_the_marginals_attach_to_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    figure = Figure(figsize=(10, 4), dpi=50)
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    returned = plots_nodes.node_posterior_marginals(_bimodal_layer(), num_samples=300, ax=right)
    assert returned is figure and figure.axes == [left, right]
    assert not left.has_data() and not left.child_axes
    assert float(np.sum(right.collections[0].get_array())) == 300
    assert right.get_xlabel() == "z[0]" and len(right.child_axes) == 2
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("ax", ["joint", Figure, np.zeros(2)])
def test_a_bad_ax_is_one_value_error_and_writes_nothing(ax, tmp_path):
    ax = ax() if ax is Figure else ax
    with pytest.raises(ValueError) as error:
        plots_nodes.node_posterior_marginals(_bimodal_layer(), tmp_path / "nodes.png",
                                             num_samples=50, ax=ax)
    message = str(error.value)
    assert message.startswith("`ax` must be a matplotlib Axes") and "\n" not in message
    assert type(ax).__name__ in message
    assert os.listdir(tmp_path) == []


def test_works_on_the_output_channels_of_a_conv_layer(tmp_path):
    layer = NodeConv2D(3, 2, noise="output", kl_weight=1.0)
    layer.build((None, 5, 5, 2))
    plots_nodes.node_posterior_marginals(layer, tmp_path / "c.png", site="output", dims=(2, 0),
                                         num_samples=200)
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(site="middle"), r"`site`.*got 'middle'"),
        (dict(dims=(1, 1)), r"`dims` must be two different node indices in \[0, 3\).*\(1, 1\)"),
        (dict(dims=(0, 3)), r"`dims`.*\[0, 3\).*\(0, 3\)"),
        (dict(dims=(0,)), r"`dims` must be two different node indices in \[0, 3\), got \(0,\)"),
        (dict(dims=(0.0, 1)), r"`dims\[0\]` must be a non-negative int, got 0.0"),
        (dict(num_samples=1), r"`num_samples` must be an int >= 2, got 1"),
        (dict(component=2), r"`component` must be an int in 0\.\.1, got 2"),
        (dict(path="nodes.jpg"), r"end in \.png"),
        (dict(path="no/such/dir/nodes.png"), r"does not exist"),
        (dict(layer="dense"), r"`layer` must be a NodeDense or NodeConv2D, got Dense"),
        (dict(layer="unbuilt"), r"`layer` 'node_dense.*' is not built"),
    ],
)
def test_invalid_arguments_raise_value_errors_and_write_nothing(overrides, message, tmp_path,
                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    kwargs = dict(layer=_bimodal_layer(), path=tmp_path / "nodes.png", num_samples=50)
    kwargs.update(overrides)
    if kwargs["layer"] == "dense":
        kwargs["layer"] = keras.layers.Dense(2)
    elif kwargs["layer"] == "unbuilt":
        kwargs["layer"] = NodeDense(2)
    with pytest.raises(ValueError, match=message):
        plots_nodes.node_posterior_marginals(**kwargs)
    assert os.listdir(tmp_path) == []
