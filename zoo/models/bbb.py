"""Bayes by Backprop (Blundell et al. 2015): the `bbb_mlp` family.

`bbb_mlp` is the registry's `bbb_mlp` and `bbb_mlp_heteroscedastic` and the main job's model
(`python -m zoo` builds it with hidden_units=(50, 50), learning_rate=3e-3 and
heteroscedastic=True). Builder arguments as in `zoo.models._common`.

Example:
>>> model = bbb_mlp((8,), num_train=927, hidden_units=(50, 50), heteroscedastic=True)
>>> model.output.shape
(None, 2)
"""

import math

from tfp_bnn import layers as bnn_layers
from tfp_bnn import posteriors
from tfp_bnn import priors
from zoo.models import _common

# Blundell et al. (2015), sec. 3.3: a wide and a narrow zero-mean Gaussian, pi = 1/2,
# sigma1 = 1, sigma2 = e^-6; the narrow one holds the weights the data do not need near zero.
PRIOR = priors.ScaleMixturePrior(pi=0.5, sigma1=1.0, sigma2=math.exp(-6.0))
# sigma = softplus(-5) ~= 0.007 at the start, so the weight noise does not swamp the first
# gradient steps (Blundell et al. start small too).
RHO_INIT = -5.0


def bbb_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
            heteroscedastic=False, hidden_units=None, prior=PRIOR, posterior=None,
            learning_rate=_common.LEARNING_RATE, decay_steps=None):
    """A compiled Bayes-by-Backprop MLP of `DenseReparameterization` layers.

    Scale-mixture prior, mean-field Gaussian posterior sigma = softplus(rho) starting at
    rho = -5, and the Monte Carlo KL log q(w) - log p(w) at the sampled weights (Blundell et
    al. 2015, eq. 2 and sec. 3.3: the mixture has no closed form). The objective per example
    is mean NLL + KL / num_train.

    Args:
        input_shape: shape of one example; images are flattened.
        task: "regression" or "classification".
        num_classes: number of classes, for classification.
        num_train: N, the number of training examples; kl_weight = 1/N.
        seed: int >= 0; seeds every layer's initial weights and weight noise.
        heteroscedastic: regression only: predict the noise variance from x instead of
            learning one for all inputs.
        hidden_units: hidden-layer widths; None for (50,) (regression) or (128, 128).
        prior: a `tfp_bnn.priors.Prior` for every weight.
        posterior: a `tfp_bnn.posteriors.Posterior`; None for `MeanFieldNormal(rho_init=-5)`.
        learning_rate: Adam's initial learning rate.
        decay_steps: if given, a cosine decay to 10% of the learning rate over this many
            steps (the total number of training steps): the late, small steps average out
            the weight-noise gradient instead of jumping between modes.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    posterior = posterior or posteriors.MeanFieldNormal(rho_init=RHO_INIT)

    def make(units, activation, index, name):
        return bnn_layers.DenseReparameterization(
            units, activation=activation, prior=prior, posterior=posterior,
            kl_weight=1.0 / num_train, kl_estimator="mc",
            seed=_common.layer_seed(seed, index), name=name)
    name = "bbb_mlp_heteroscedastic" if heteroscedastic else "bbb_mlp"
    return _common.mlp(make, name, input_shape, task, num_classes, heteroscedastic,
                       hidden_units, learning_rate, decay_steps)
