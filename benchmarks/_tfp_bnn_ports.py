"""The tfp_bnn side of tfp_ports.py: each TFP program ported to tfp_bnn on Keras 3.

`ours_lenet`, `ours_regression` (cases 1-4) and `ours_vgp` (case 5) mirror
`_tfp_originals` layer for layer;
a tfp_bnn name a port needs and cannot import ends that port with
`NotAvailable` (reported in the table), not the run.
"""

import math
import time

import numpy as np
import tensorflow as tf

from _tfp_programs import LENET_BATCH
from _tfp_programs import LENET_LR
from _tfp_programs import REG_BATCH
from _tfp_programs import REG_LR
from _tfp_programs import VGP_INDUCING
from _tfp_programs import VGP_NOISE_INIT
from _tfp_programs import X_RANGE
from _tfp_programs import NotAvailable
from _tfp_programs import batches
from _tfp_programs import classification_scores
from _tfp_programs import mixture_scores
from _tfp_programs import gaussian_scores
from _tfp_programs import negloglik
from _tfp_programs import normal_learned
from _tfp_programs import normal_unit


def _ours(*names):
    """tfp_bnn attributes by dotted name, or NotAvailable naming the missing one."""
    try:
        import tfp_bnn
    except Exception as error:  # noqa: BLE001  (a package mid-edit must not stop the TFP side)
        raise NotAvailable(f"tfp_bnn does not import: {type(error).__name__}: {error}") from None

    found = []
    for name in names:
        value = tfp_bnn
        try:
            for part in name.split("."):
                value = getattr(value, part)
        except AttributeError:
            raise NotAvailable(f"tfp_bnn.{name} is not available yet") from None
        found.append(value)
    return found


def _ours_notebook_variational():
    """DenseVariational arguments equal to the notebook's posterior_mean_field / prior_trainable.

    posterior_mean_field: loc 0, scale 1e-5 + softplus(log(e - 1) + t), t = 0
    at the start; prior_trainable: N(t, 1) with a trainable t = 0 at the start.
    """
    mean_field_normal, trainable_normal_prior = _ours("posteriors.MeanFieldNormal",
                                                      "priors.TrainableNormalPrior")
    try:
        posterior = mean_field_normal(rho_init=math.log(math.e - 1.0), rho_init_stddev=0.0,
                                      scale_offset=1e-5)
    except TypeError:
        raise NotAvailable("tfp_bnn.posteriors.MeanFieldNormal(scale_offset=) is not "
                           "available yet") from None
    return {"posterior": posterior, "prior": trainable_normal_prior(),
            "kernel_initializer": "zeros", "bias_initializer": "zeros"}


def ours_lenet(data, epochs, seed, mc_samples):
    import keras

    conv2d_flipout, dense_flipout = _ours("layers.Conv2DFlipout", "layers.DenseFlipout")
    x_train, x_test, y_train, y_test = data
    kl_weight = 1.0 / len(x_train)
    keras.utils.set_random_seed(seed)

    def conv(filters):
        return conv2d_flipout(filters, kernel_size=5, padding="same", activation="relu",
                              kl_weight=kl_weight)

    def pool():
        return keras.layers.MaxPooling2D(pool_size=2, strides=2, padding="same")

    model = keras.Sequential([
        keras.Input(x_train.shape[1:]),
        conv(6), pool(), conv(16), pool(), conv(120),
        keras.layers.Flatten(),
        dense_flipout(84, activation="relu", kl_weight=kl_weight),
        dense_flipout(10, kl_weight=kl_weight),
    ])
    model.compile(optimizer=keras.optimizers.Adam(LENET_LR),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    model.fit(batches(x_train, y_train, LENET_BATCH, epochs, seed), shuffle=False, verbose=0)
    seconds = time.perf_counter() - start
    probs = [tf.nn.softmax(model(x_test, training=False)).numpy() for _ in range(mc_samples)]
    return (*classification_scores(probs, y_test), seconds)


def ours_regression(case, data, epochs, seed, mc_samples):
    import keras
    import tensorflow_probability as tfp

    tfd = tfp.distributions
    (distribution_lambda,) = _ours("layers.DistributionLambda")
    (distribution_of,) = _ours("distributions.distribution_of")
    x, y, x_test, y_test = data
    keras.utils.set_random_seed(seed)
    if case == "case1":
        body = [keras.layers.Dense(1), distribution_lambda(normal_unit(tfd))]
    elif case == "case2":
        body = [keras.layers.Dense(2), distribution_lambda(normal_learned(tfd, 0.05))]
    else:
        (dense_variational,) = _ours("layers.DenseVariational")
        units, head = ((1, normal_unit(tfd)) if case == "case3"
                       else (2, normal_learned(tfd, 0.01)))
        body = [dense_variational(units, kl_weight=1.0 / len(x), kl_use_exact=False,
                                  **_ours_notebook_variational()),
                distribution_lambda(head)]
    model = keras.Sequential([keras.Input((1,))] + body)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=REG_LR), loss=negloglik)
    start = time.perf_counter()
    model.fit(batches(x, y, REG_BATCH, epochs, seed), shuffle=False, verbose=0)
    seconds = time.perf_counter() - start
    passes = 1 if case in ("case1", "case2") else mc_samples
    x_t = x_test.astype(np.float32)
    outputs = [distribution_of(model(x_t)) for _ in range(passes)]
    log_probs = [d.log_prob(y_test.astype(np.float32)).numpy() for d in outputs]
    means = [d.mean().numpy() for d in outputs]
    return (*mixture_scores(log_probs, means, y_test), seconds)


def ours_vgp(data, epochs, seed):
    """Case 5 in float64, as the notebook runs it; floatx is restored after.

    The notebook's RBFKernelFn (softplus(0.1 a), softplus(5 l), a = l = 0 at
    the start) is ExponentiatedQuadraticProvider with initial values
    softplus(0) = log 2 and the same multipliers.
    """
    import keras

    vgp_layer, eq_provider, distribution_of = _ours(
        "layers.VariationalGaussianProcess", "kernels.ExponentiatedQuadraticProvider",
        "distributions.distribution_of")
    x, y, x_test, y_test = data
    previous = keras.config.floatx(), keras.config.dtype_policy()
    # The notebook's float64; without it Keras casts the GP's output before the loss.
    # The policy too: Keras 3 caches floatx in the global dtype policy the first
    # time a layer is made, so after the other cases set_floatx alone is ignored.
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        keras.utils.set_random_seed(seed)
        kernel = eq_provider(amplitude=math.log(2.0), length_scale=math.log(2.0),
                             amplitude_multiplier=0.1, length_scale_multiplier=5.0)
        inducing = np.linspace(*X_RANGE, num=VGP_INDUCING)[:, None]
        model = keras.Sequential([
            keras.Input((1,), dtype="float64"),
            keras.layers.Dense(1, kernel_initializer="ones", use_bias=False),
            vgp_layer(
                num_inducing_points=VGP_INDUCING, kernel_provider=kernel, event_shape=[1],
                inducing_index_points_initializer=keras.initializers.Constant(inducing),
                unconstrained_observation_noise_variance_initializer=(
                    keras.initializers.Constant(np.float64(VGP_NOISE_INIT)))),
        ])
        kl_weight = np.float64(REG_BATCH / len(x))

        def loss(y_true, rv_y):
            return rv_y.variational_loss(y_true, kl_weight=kl_weight)

        model.compile(optimizer=keras.optimizers.Adam(learning_rate=REG_LR), loss=loss)
        start = time.perf_counter()
        model.fit(batches(x, y, REG_BATCH, epochs, seed, dtype="float64"), shuffle=False,
                  verbose=0)
        seconds = time.perf_counter() - start
        yhat = distribution_of(model(x_test))
        return (*gaussian_scores(yhat.mean().numpy(), yhat.stddev().numpy(), y_test), seconds)
    finally:
        keras.config.set_floatx(previous[0])
        keras.config.set_dtype_policy(previous[1])
