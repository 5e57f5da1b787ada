"""Post-hoc Laplace approximations for trained Keras models (no retraining).

- `LastLayerLaplace(model, likelihood, hessian)`: a Gaussian posterior over the last Dense
  layer's weights, with full or Kronecker-factored GGN, the prior precision fitted by the
  marginal likelihood, a closed-form linearised predictive and a `predictive_model()` that
  `tfp_bnn.predict` samples (Daxberger et al. 2021, "Laplace Redux", NeurIPS).
- `LaplaceDense`: that predictive model's last layer.
- `curvature`: the GGN, its eigenbasis and the evidence.

On every Keras backend: the fit reads the features through the Keras model and needs no
autodiff (the last Dense layer's GGN is in closed form), the post-hoc linear algebra is
float64 NumPy, and `LaplaceDense` computes in `keras.ops`.
"""

from tfp_bnn.laplace import curvature
from tfp_bnn.laplace.laplace_dense import LaplaceDense
from tfp_bnn.laplace.last_layer import LastLayerLaplace
from tfp_bnn.laplace.last_layer import last_dense

__all__ = [
    "LaplaceDense",
    "LastLayerLaplace",
    "curvature",
    "last_dense",
]
