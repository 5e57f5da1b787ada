"""PNG figure of a node-based layer's posterior over two of its nodes.

Answers the question "is the trained posterior multi-modal?" for a
node-based BNN (Trinh et al. 2022) by sampling: draw z from a `NodeDense` /
`NodeConv2D` posterior and show the two marginals and their joint. Same
conventions as `tfp_bnn.plots`: matplotlib imported only when the function
runs, a private Agg canvas, and an atomic write of `path`.
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.layers.node_base import NodeLayer
from tfp_bnn.plots import png_path
from tfp_bnn.plots import save_figure

_BINS = 40


def _node_pair(dims, nodes):
    """`dims` as two different node indices in [0, nodes); errors name `dims`."""
    dims = check.integers("dims", dims, minimum=0)
    if len(dims) != 2 or dims[0] == dims[1] or max(dims) >= nodes:
        raise ValueError(
            f"`dims` must be two different node indices in [0, {nodes}), got {dims!r}."
        )
    return dims


def node_posterior_marginals(layer, path, site="input", dims=(0, 1), num_samples: int = 2000,
                             component=None) -> str:
    """Writes histograms of z[dims[0]], z[dims[1]] and of the pair, as one PNG.

    A corner plot: the marginal histogram of each node above / beside the 2-D
    histogram of the pair, from `layer.node_posterior_samples`. With
    `component=None` the samples come from the whole mixture (sample i from
    component i mod K) so several modes show as several blobs.

    Args:
        layer: a built `NodeDense` or `NodeConv2D`.
        path: where to write the PNG; must end in .png, its directory must exist.
        site: "input" or "output", one of the layer's noise sites.
        dims: two different node indices of that site.
        num_samples: draws of z, an int >= 2.
        component: a component index, or None for the mixture.

    Returns:
        `path`, as a string.

    Example:
    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.NodeDense(8, num_components=2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "nodes.png")
    >>> path = node_posterior_marginals(model.layers[0], path, dims=(0, 3), num_samples=200)
    >>> os.path.exists(path)
    True
    """
    path = png_path(path)
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

    def draw(figure):
        grid = figure.add_gridspec(2, 2, width_ratios=(3, 1), height_ratios=(1, 3),
                                   hspace=0.05, wspace=0.05)
        joint = figure.add_subplot(grid[1, 0])
        top = figure.add_subplot(grid[0, 0], sharex=joint)
        right = figure.add_subplot(grid[1, 1], sharey=joint)
        joint.hist2d(pair[:, 0], pair[:, 1], bins=_BINS, cmap="viridis")
        joint.set_xlabel(names[0])
        joint.set_ylabel(names[1])
        top.hist(pair[:, 0], bins=_BINS, density=True, color="C0")
        right.hist(pair[:, 1], bins=_BINS, density=True, color="C0", orientation="horizontal")
        top.tick_params(labelbottom=False)
        right.tick_params(labelleft=False)
        figure.suptitle(f"{layer.name}: {site} nodes, {which} (n = {len(pair)})")

    return save_figure(draw, path)
