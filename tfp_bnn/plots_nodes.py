"""PNG figure of a node-based layer's posterior over two of its nodes.

Answers the seed's question "how do we know if the trained model is
multi-modal? (can we generate samples and plot one or two dimensions?)"
(seed 001): draw z from a `NodeDense` / `NodeConv2D` posterior and show the
two marginals and their joint. Same conventions as `tfp_bnn.plots`:
matplotlib imported only when the function runs, a private Agg canvas, and
an atomic write of `path`.
"""

import numbers

import numpy as np

from tfp_bnn.layers.node_base import NodeLayer
from tfp_bnn.plots import _check_path
from tfp_bnn.plots import _save

_BINS = 40


def _check_dims(dims, nodes):
    try:
        dims = tuple(dims)
    except TypeError:
        dims = ()
    if len(dims) != 2 or any(
        isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in dims
    ):
        raise ValueError(f"`dims` must be a pair of node indices, got {dims!r}.")
    dims = tuple(int(d) for d in dims)
    if dims[0] == dims[1] or not all(0 <= d < nodes for d in dims):
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
    >>> node_posterior_marginals(model.layers[0], "nodes.png", dims=(0, 3))
    """
    path = _check_path(path)
    if not isinstance(layer, NodeLayer):
        raise ValueError(f"`layer` must be a NodeDense or NodeConv2D, got {type(layer).__name__}.")
    if not layer.built:
        raise ValueError(f"`layer` '{layer.name}' is not built; call it on data first.")
    if site not in layer.sites:
        raise ValueError(
            f"`site` must be one of the layer's noise sites {layer.sites}, got {site!r}."
        )
    dims = _check_dims(dims, layer.node_counts[site])
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) \
            or num_samples < 2:
        raise ValueError(f"`num_samples` must be an int >= 2, got {num_samples!r}.")
    samples = layer.node_posterior_samples(int(num_samples), site=site, component=component)
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

    return _save(draw, path)
