"""Corner plot of a node-based layer's posterior over two of its nodes.

Answers the question "is the trained posterior multi-modal?" for a
node-based BNN (Trinh et al. 2022) by sampling: draw z from a `NodeDense` /
`NodeConv2D` posterior and show the two marginals and their joint. Same
conventions as `tfp_bnn.plots`: matplotlib imported only when the function
runs, drawn on a given Axes or a new off-screen Figure, which is returned,
and an atomic write of an optional `path`.
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.layers.node.node_base import NodeLayer
from tfp_bnn.plots import figure_axes
from tfp_bnn.plots import png_path
from tfp_bnn.plots import save

_BINS = 40


def _node_pair(dims, nodes):
    """`dims` as two different node indices in [0, nodes); errors name `dims`."""
    dims = check.integers("dims", dims, minimum=0)
    if len(dims) != 2 or dims[0] == dims[1] or max(dims) >= nodes:
        raise ValueError(
            f"`dims` must be two different node indices in [0, {nodes}), got {dims!r}."
        )
    return dims


def node_posterior_marginals(layer, path=None, site="input", dims=(0, 1),
                             num_samples: int = 2000, component=None, *, ax=None):
    """Draws histograms of z[dims[0]], z[dims[1]] and of the pair: a corner plot.

    The 2-D histogram of the pair goes on `ax`; the marginal histogram of
    each node goes on an inset Axes attached above / beside it (as
    matplotlib's scatter-histogram example places them), so the plot fits
    in one panel of a larger figure. The samples come from
    `layer.node_posterior_samples`; with `component=None` from the whole
    mixture (sample i from component i mod K), so several modes show as
    several blobs.

    Args:
        layer: a built `NodeDense` or `NodeConv2D`.
        path: optional PNG to write; must end in .png, its directory must exist.
        site: "input" or "output", one of the layer's noise sites.
        dims: two different node indices of that site.
        num_samples: draws of z, an int >= 2.
        component: a component index, or None for the mixture.
        ax: optional `matplotlib.axes.Axes` for the joint histogram; None draws
            on a new Figure. The marginals are its `child_axes` (top, right),
            drawn outside it: leave room above and to the right of `ax`.

    Returns:
        The `matplotlib.figure.Figure` drawn on.

    Example:
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.NodeDense(8, num_components=2)])
    >>> figure = node_posterior_marginals(model.layers[0], dims=(0, 3), num_samples=200)
    >>> joint = figure.axes[0]
    >>> joint.get_xlabel(), len(joint.child_axes)
    ('z[0]', 2)
    """
    path = png_path(path, allow_none=True)
    check.axes("ax", ax)
    if not isinstance(layer, NodeLayer):
        raise ValueError(f"`layer` must be a NodeDense or NodeConv2D, got {type(layer).__name__}.")
    if not layer.built:
        raise ValueError(f"`layer` '{layer.name}' is not built; call it on data first.")
    check.one_of("site", site, layer.sites)
    dims = _node_pair(dims, layer.node_counts[site])
    num_samples = check.integer("num_samples", num_samples, minimum=2)
    samples = layer.node_posterior_samples(num_samples, site=site, component=component)
    pair = samples[:, list(dims)].astype(np.float64)
    if not np.all(np.isfinite(pair)):
        raise ValueError(f"The posterior samples of nodes {dims} are not all finite.")
    names = [f"z[{d}]" for d in dims]
    which = "mixture" if component is None else f"component {component}"

    new = ax is None
    figure, joint = figure_axes(ax)
    if new:  # room above and to the right of the joint panel for the marginals
        figure.subplots_adjust(top=0.72, right=0.76)
    top = joint.inset_axes([0.0, 1.04, 1.0, 0.28], sharex=joint)
    right = joint.inset_axes([1.04, 0.0, 0.28, 1.0], sharey=joint)
    joint.hist2d(pair[:, 0], pair[:, 1], bins=_BINS, cmap="viridis")
    joint.set_xlabel(names[0])
    joint.set_ylabel(names[1])
    top.hist(pair[:, 0], bins=_BINS, density=True, color="C0")
    right.hist(pair[:, 1], bins=_BINS, density=True, color="C0", orientation="horizontal")
    top.tick_params(labelbottom=False)
    right.tick_params(labelleft=False)
    top.set_title(f"{layer.name}: {site} nodes, {which} (n = {len(pair)})")
    return save(figure, path) if path is not None else figure
