"""Sampling-free propagation of means and covariances (moment propagation).

Pushes the mean and covariance of activations through a transformer block
(Vaswani et al. 2017) whose weights have independent Gaussian (mean-field)
posteriors, instead of sampling weights, as deterministic variational
inference does for MLPs (Wu et al. 2019). Every function takes and
returns `Moments(mean, cov, mode)` (see `tfp_bnn.moments.gaussian`): mode
"full" keeps the covariance of all tokens and features of an example,
mode "diagonal" only variances.
The functions are `keras.ops` (batch first, float32): they run on the
TensorFlow and the JAX backend and compile under
tf.function(jit_compile=True) and jax.jit. `select_token` and `mean_over_tokens`
(`tfp_bnn.moments.pooling`) reduce a sequence to one vector per example.

Where this goes beyond the plain first-order scheme (independent products,
Taylor rules, a constant LayerNorm divisor, independent residual branches):

- Product of independent random matrices C = A B: the covariance runs over
  1 <= i, j <= n*q (the entries of the product), and its first term is
  tr(S^A_{k1 k2} (S^B_{m1 m2})^T), i.e. sum_{r,s} Cov[a_r k1, a_s k2]
  Cov[b_r m1, b_s m2]; the untransposed tr(S^A_{k1 k2} S^B_{m1 m2}) is
  wrong whenever a cross block is not symmetric, as after a softmax.
- Concatenated heads: block b of the output covariance belongs to head
  (b - 1) mod H and token floor((b - 1) / H).
- LayerNorm divides by the standard deviation sqrt(var + epsilon), with
  Keras' epsilon.
- LayerNorm's divisor uses E[var_j] = mean_i (m_ji - mbar_j)^2 + tr(P C_jj P)/I,
  the means' spread plus the propagated variance, not the means only: it
  tracks sampled LayerNorm when the noise is not small (measured in
  tests/moments/test_layer_norm.py).
- LayerNorm's centring x - mean_i(x) is linear and applied exactly to the
  covariance (P C P, P = I - 11^T / I), not to the means only.
- LayerNorm's divisor is not a constant: by default
  (`method="linearized"`) the whole normalisation is linearised with its
  Jacobian (P - mu mu^T / I) / s at the mean input, which removes the
  radial part of the noise as a sampled LayerNorm does ("constant" keeps
  the constant-divisor rule). Measured in a block: first LayerNorm's
  variance error 0.374 -> 0.113 (full), 0.352 -> 0.226 (diagonal).
- The feed-forward residual y + z is not treated as independent: by default
  (`residual_covariance=True`) the first-order Cov[y, z] = M2^T D_Phi
  M1^T Cov[z] is kept, and for a random block input the attention
  residual's Cov[a, x] through the value path, with the heads' cross-
  covariance through that path (`tfp_bnn.moments.residual`).
- The ReLU does not go through the softmax's first-order rule: its
  first-order rule has Jacobian diag(1[m > 0]) ("taylor"), and
  the default is the exact rectified-Gaussian moments instead.
- The KL sums the general diagonal closed form, one variance per weight
  (a mean-field posterior), with any prior scale (`gaussian_kl_to_normal`).
- The data term scores the moment-matched Gaussian predictive, which is not
  the expected log-likelihood (so not a strict bound), and would have no
  observation noise, so its Sigma can be singular: `gaussian_log_likelihood`
  adds `noise_variance` and a relative `jitter`.

Approximations (everything else is exact given independence):

- Softmax: first-order Taylor at the mean (`tfp_bnn.moments.softmax`).
- Heads independent: exact for a constant input, whose
  heads use disjoint independent weights; for a random input the heads'
  cross-covariance through the value path (attention weights at their
  mean) is added by `transformer_block`, the score path's is not.
- q, k and v (hence scores and values) independent: exact for a constant
  input, approximate for a random one, where they share x.
- Residual branches correlated to first order (`residual_covariance`):
  a + x is exact for a constant x; for a random x, Cov[a, x] is the
  first-order value-path term (score path dropped). For y + z, Cov[y, z]
  is exact for the linear maps, Stein's lemma for the ReLU (z and the
  ReLU input jointly Gaussian), and neglects the slopes' dependence on
  the ffn1 weights. With `residual_covariance=False` the branches are
  independent (the plain scheme).
- LayerNorm: first-order Taylor expansion of the whole normalisation
  (x - mean(x)) / sqrt(var(x) + epsilon) around the mean input, with the
  noise's expected share of var(x) in the divisor ("linearized"); the
  curvature (second order in the noise) is dropped. "constant" instead
  treats the divisor as a constant per token.
- ReLU: each unit's input treated as Gaussian (exact moments of the
  rectified Gaussian); cross-covariances Phi_a Phi_b C_ab, exact to first
  order in C_ab.
- Diagonal mode drops all covariances, including the cross-token ones the
  shared weights create even for a constant input; full mode keeps them
  (up to the approximations above) at memory up to B * H * J^4
  (`check_full_covariance`). With the defaults full mode is clearly more
  accurate at the block output (variance error 0.086 vs 0.207 for
  diagonal, tests/moments/test_transformer.py), since the Jacobian
  LayerNorm and the residual cross terms act on covariances that
  diagonal mode no longer has.
"""

from tfp_bnn.moments.attention import multi_head_attention
from tfp_bnn.moments.attention import scaled_dot_product_attention
from tfp_bnn.moments.gaussian import MODES
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import check_mode
from tfp_bnn.moments.layer_norm import layer_norm
from tfp_bnn.moments.likelihood import diagonal_log_likelihood
from tfp_bnn.moments.likelihood import gaussian_kl_to_normal
from tfp_bnn.moments.likelihood import gaussian_log_likelihood
from tfp_bnn.moments.linear import dense
from tfp_bnn.moments.memory import check_full_covariance
from tfp_bnn.moments.memory import full_covariance_bytes
from tfp_bnn.moments.memory import full_covariance_sizes
from tfp_bnn.moments.pooling import mean_over_tokens
from tfp_bnn.moments.pooling import select_token
from tfp_bnn.moments.products import matmul
from tfp_bnn.moments.products import transpose
from tfp_bnn.moments.relu import relu
from tfp_bnn.moments.residual import add
from tfp_bnn.moments.softmax import softmax
from tfp_bnn.moments.transformer import PARAM_KEYS
from tfp_bnn.moments.transformer import transformer_block

__all__ = [
    "MODES",
    "Moments",
    "PARAM_KEYS",
    "add",
    "check_full_covariance",
    "check_mode",
    "dense",
    "diagonal_log_likelihood",
    "full_covariance_bytes",
    "full_covariance_sizes",
    "gaussian_kl_to_normal",
    "gaussian_log_likelihood",
    "layer_norm",
    "matmul",
    "mean_over_tokens",
    "multi_head_attention",
    "relu",
    "scaled_dot_product_attention",
    "select_token",
    "softmax",
    "transformer_block",
    "transpose",
]
