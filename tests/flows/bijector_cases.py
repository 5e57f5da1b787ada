"""Shared by the flow bijector tests: random parameters, constructors, the autodiff log-det."""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.flows import BatchNormFlow
from tfp_bnn.flows import Planar
from tfp_bnn.flows import Radial
from tfp_bnn.flows import Sylvester

tfb = tfp.bijectors

D = 5
RANK = 3
KINDS = ("planar", "radial", "sylvester", "batch_norm")
# Log-determinants from the closed forms and from an LU of the autodiff
# Jacobian agree to a few thousand float64 ulps; a wrong term is off by O(0.01+).
TOL = 4096 * np.finfo(np.float64).eps


def raw_params(kind, rng, scale=1.0, dim=D, rank=RANK, dtype="float64"):
    """Random parameters of one step, `scale` times standard normal draws."""
    shapes = {
        "planar": {"w": (dim,), "u": (dim,), "b": ()},
        "radial": {"z0": (dim,), "alpha_raw": (), "beta_raw": ()},
        "sylvester": {"householder": (rank, dim), "r_raw": (rank, rank),
                      "r_tilde_raw": (rank, rank), "b": (rank,)},
        "batch_norm": {"mean": (dim,), "variance": (dim,), "log_scale": (dim,),
                       "shift": (dim,)},
    }[kind]
    params = {name: (scale * rng.normal(size=shape)).astype(dtype)
              for name, shape in shapes.items()}
    if kind == "batch_norm":
        params["variance"] = np.abs(params["variance"])
    return params


def make(kind, params):
    cls = {"planar": Planar, "radial": Radial, "sylvester": Sylvester,
           "batch_norm": BatchNormFlow}[kind]
    return cls(**params)


def chain(kinds, rng, **kwargs):
    """tfb.Chain applying `kinds` in order (Chain applies its list last to first)."""
    steps = [make(kind, raw_params(kind, rng, **kwargs)) for kind in kinds]
    return tfb.Chain(list(reversed(steps)))


def autodiff_log_det(bijector, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = bijector.forward(x)
    return tf.linalg.slogdet(tape.batch_jacobian(y, x))[1].numpy()
