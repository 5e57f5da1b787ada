"""Sampling-free propagation of means and covariances (seed 000).

Pushes the mean and covariance of activations through a transformer block
whose weights have independent Gaussian (mean-field) posteriors, instead
of sampling weights. Every function takes and returns `Moments(mean, cov,
mode)` (see `tfp_bnn.moments.gaussian`): mode "full" keeps the covariance
of all tokens and features of an example, mode "diagonal" only variances.
The functions are pure TensorFlow (batch first, float32) and compile
under tf.function(jit_compile=True). `select_token` and `mean_over_tokens`
(`tfp_bnn.moments.pooling`) reduce a sequence to one vector per example.

Deviations from the seed (its slips, fixed here):

- Prop. 2: the indices run over 1 <= i, j <= n*q (the entries of A^T B),
  not n*p.
- Prop. 2 / eq. (9): the first term is tr(S^A_{k1 k2} (S^B_{m1 m2})^T),
  i.e. sum_{r,s} Cov[a_r k1, a_s k2] Cov[b_r m1, b_s m2]; the seed's
  tr(S^A_{k1 k2} S^B_{m1 m2}) (its proof transposes E[a_k2 a_k1^T]) is
  wrong whenever a cross block is not symmetric, as after a softmax. The
  proof's mean-product term also pairs the factors wrongly; eq. (9)'s
  other two terms are right.
- §4.4: the block structure of the concatenated heads indexes heads by
  (block - 1) mod H and tokens by floor((block - 1) / H), not mod / by D.
- §4.5: LayerNorm divides by the standard deviation sqrt(var + epsilon),
  not by the variance sigma, and with Keras' epsilon.
- §4.5: the divisor uses E[var_j] = mean_i (m_ji - mbar_j)^2 + tr(P C_jj P)/I,
  the means' spread plus the propagated variance, not the means only: it
  tracks sampled LayerNorm when the noise is not small (measured in
  tests/moments/test_layer_norm.py).
- Prop. 4: the centring x - mean_i(x) is linear and applied exactly to the
  covariance (P C P, P = I - 11^T / I); the seed keeps the uncentred
  covariance next to centred means.
- §4.6 sends the ReLU through "Prop. 3 with J = 1", the softmax rule; the
  ReLU's first-order rule has Jacobian diag(1[m > 0]) ("taylor"), and
  the default is the exact rectified-Gaussian moments instead.
- Eq. (12) assumes one variance per row; a mean-field posterior has one per
  weight, so `gaussian_kl_to_normal` sums the general diagonal closed form
  (with any prior scale).
- Eq. (13) scores the moment-matched Gaussian predictive, which is not the
  expected log-likelihood of §3 (so not a strict bound), and has no
  observation noise, so its Sigma can be singular: `gaussian_log_likelihood`
  adds `noise_variance` and a relative `jitter`.
- Minor: §4.2 points to §4.4 for the re-indexing done in §4.3.3; Prop. 3's
  proof expands both rows around one mean (each row uses its own here).

Approximations (everything else is exact given independence):

- Softmax: first-order Taylor at the mean (seed eq. 10-11, Prop. 3).
- Heads independent (seed footnote 5): exact for a constant input, whose
  heads use disjoint independent weights; approximate for a random input.
- q, k and v (hence scores and values) independent: exact for a constant
  input, approximate for a random one, where they share x.
- Residual branches independent: a + x is exact for a constant x; y + z
  (feed-forward residual) and any residual of a random input are not.
- LayerNorm statistics (the divisor) treated as constants per token.
- ReLU: each unit's input treated as Gaussian (exact moments of the
  rectified Gaussian); cross-covariances Phi_a Phi_b C_ab, exact to first
  order in C_ab.
- Diagonal mode drops all covariances, including the cross-token ones the
  shared weights create even for a constant input; full mode keeps them
  (up to the approximations above) at memory up to B * H * J^4
  (`check_full_covariance`).
"""

from tfp_bnn.moments.attention import multi_head_attention
from tfp_bnn.moments.attention import scaled_dot_product_attention
from tfp_bnn.moments.gaussian import MODES
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import check_mode
from tfp_bnn.moments.layer_norm import layer_norm
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
