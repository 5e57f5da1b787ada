"""Sampling-free propagation of means and covariances (seed 000).

Pushes the mean and covariance of activations through a transformer block
whose weights have independent Gaussian (mean-field) posteriors, instead
of sampling weights. Every function takes and returns `Moments(mean, cov,
mode)` (see `tfp_bnn.moments.gaussian`): mode "full" keeps the covariance
of all tokens and features of an example, mode "diagonal" only variances.
The functions are pure TensorFlow (batch first, float32) and compile
under tf.function(jit_compile=True). `select_token` and `mean_over_tokens`
(`tfp_bnn.moments.pooling`) reduce a sequence to one vector per example.

Deviations from the seed (its slips fixed, two of its approximations
improved):

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
- §4.5: the seed treats the LayerNorm divisor as a constant; by default
  (`method="linearized"`) the whole normalisation is linearised with its
  Jacobian (P - mu mu^T / I) / s at the mean input, which removes the
  radial part of the noise as a sampled LayerNorm does ("constant" keeps
  the seed's rule). Measured in a block: first LayerNorm's variance error
  0.374 -> 0.113 (full), 0.352 -> 0.226 (diagonal).
- §4.6 adds y + z as independent ("which is not true"); by default
  (`residual_covariance=True`) the first-order Cov[y, z] = M2^T D_Phi
  M1^T Cov[z] is kept, and for a random block input the attention
  residual's Cov[a, x] through the value path, with the heads' cross-
  covariance through that path (`tfp_bnn.moments.residual`).
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
  independent (the seed).
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
