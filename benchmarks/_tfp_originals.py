"""The TFP side of tfp_ports.py: the programs on tf_keras and `tfp.layers`, as published.

`tfp_lenet` is `bayesian_neural_network.py`'s LeNet-5; `tfp_regression`
cases 1-4 and `tfp_vgp` case 5 of `Probabilistic_Layers_Regression.ipynb`.
Each returns (test NLL, accuracy or RMSE, training seconds).
"""

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
from _tfp_programs import batches
from _tfp_programs import classification_scores
from _tfp_programs import gaussian_scores
from _tfp_programs import mixture_scores
from _tfp_programs import negloglik
from _tfp_programs import normal_learned
from _tfp_programs import normal_unit


def tfp_modules():
    """(tf_keras, tfp), tf_keras imported first."""
    import tf_keras  # noqa: F401  (first: tfp.layers is built on it)
    import tensorflow_probability as tfp

    return tf_keras, tfp


def tfp_lenet(data, epochs, seed, mc_samples):
    tf_keras, tfp = tfp_modules()
    tfd = tfp.distributions
    x_train, x_test, y_train, y_test = data
    num_train = len(x_train)
    tf_keras.utils.set_random_seed(seed)

    def divergence(q, p, _):  # the program's KL / N, per layer
        return tfd.kl_divergence(q, p) / num_train

    def conv(filters):
        return tfp.layers.Convolution2DFlipout(filters, kernel_size=5, padding="SAME",
                                               activation="relu",
                                               kernel_divergence_fn=divergence)

    def pool():
        return tf_keras.layers.MaxPooling2D(pool_size=2, strides=2, padding="SAME")

    model = tf_keras.Sequential([
        tf_keras.layers.InputLayer(input_shape=x_train.shape[1:]),
        conv(6), pool(), conv(16), pool(), conv(120),
        tf_keras.layers.Flatten(),
        tfp.layers.DenseFlipout(84, activation="relu", kernel_divergence_fn=divergence),
        tfp.layers.DenseFlipout(10, kernel_divergence_fn=divergence),
    ])
    model.compile(optimizer=tf_keras.optimizers.Adam(LENET_LR),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    model.fit(batches(x_train, y_train, LENET_BATCH, epochs, seed), verbose=0)
    seconds = time.perf_counter() - start
    probs = [tf.nn.softmax(model(x_test)).numpy() for _ in range(mc_samples)]
    return (*classification_scores(probs, y_test), seconds)


def _tfp_posterior_mean_field(tf_keras, tfp):
    """The notebook's mean-field posterior: VariableLayer(2n) -> Independent Normal."""
    tfd = tfp.distributions
    offset = float(np.log(np.expm1(1.0)))

    def make(kernel_size, bias_size=0, dtype=None):
        n = kernel_size + bias_size
        return tf_keras.Sequential([
            tfp.layers.VariableLayer(2 * n, dtype=dtype),
            tfp.layers.DistributionLambda(lambda t: tfd.Independent(
                tfd.Normal(loc=t[..., :n], scale=1e-5 + tf.nn.softplus(offset + t[..., n:])),
                reinterpreted_batch_ndims=1)),
        ])

    return make


def _tfp_prior_trainable(tf_keras, tfp):
    """The notebook's trainable prior: VariableLayer(n) -> Independent Normal(t, 1)."""
    tfd = tfp.distributions

    def make(kernel_size, bias_size=0, dtype=None):
        n = kernel_size + bias_size
        return tf_keras.Sequential([
            tfp.layers.VariableLayer(n, dtype=dtype),
            tfp.layers.DistributionLambda(lambda t: tfd.Independent(
                tfd.Normal(loc=t, scale=1.0), reinterpreted_batch_ndims=1)),
        ])

    return make


def tfp_regression(case, data, epochs, seed, mc_samples):
    tf_keras, tfp = tfp_modules()
    tfd = tfp.distributions
    x, y, x_test, y_test = data
    tf_keras.utils.set_random_seed(seed)
    if case == "case1":
        body = [tf_keras.layers.Dense(1), tfp.layers.DistributionLambda(normal_unit(tfd))]
    elif case == "case2":
        body = [tf_keras.layers.Dense(2),
                tfp.layers.DistributionLambda(normal_learned(tfd, 0.05))]
    else:
        units, head = ((1, normal_unit(tfd)) if case == "case3"
                       else (2, normal_learned(tfd, 0.01)))
        body = [tfp.layers.DenseVariational(units, _tfp_posterior_mean_field(tf_keras, tfp),
                                            _tfp_prior_trainable(tf_keras, tfp),
                                            kl_weight=1.0 / len(x)),
                tfp.layers.DistributionLambda(head)]
    model = tf_keras.Sequential([tf_keras.layers.InputLayer(input_shape=(1,))] + body)
    model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate=REG_LR), loss=negloglik)
    start = time.perf_counter()
    model.fit(batches(x, y, REG_BATCH, epochs, seed), verbose=0)
    seconds = time.perf_counter() - start
    passes = 1 if case in ("case1", "case2") else mc_samples
    x_t = x_test.astype(np.float32)
    outputs = [model(x_t) for _ in range(passes)]
    log_probs = [d.log_prob(y_test.astype(np.float32)).numpy() for d in outputs]
    means = [d.mean().numpy() for d in outputs]
    return (*mixture_scores(log_probs, means, y_test), seconds)


def tfp_vgp(data, epochs, seed):
    """Case 5 in float64, as the notebook runs it; floatx is restored after."""
    tf_keras, tfp = tfp_modules()
    x, y, x_test, y_test = data
    previous = tf_keras.backend.floatx()
    tf_keras.backend.set_floatx("float64")
    try:
        tf_keras.utils.set_random_seed(seed)

        class RBFKernelFn(tf_keras.layers.Layer):
            """Holds the two kernel parameters; softplus(0.1 a) and softplus(5 l)."""

            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self._amplitude = self.add_weight(name="amplitude", shape=(),
                                                  initializer="zeros", dtype="float64")
                self._length_scale = self.add_weight(name="length_scale", shape=(),
                                                     initializer="zeros", dtype="float64")

            def call(self, inputs):
                return inputs

            @property
            def kernel(self):
                return tfp.math.psd_kernels.ExponentiatedQuadratic(
                    amplitude=tf.nn.softplus(0.1 * self._amplitude),
                    length_scale=tf.nn.softplus(5.0 * self._length_scale))

        inducing = np.linspace(*X_RANGE, num=VGP_INDUCING)[:, None]
        model = tf_keras.Sequential([
            tf_keras.layers.InputLayer(input_shape=(1,)),
            tf_keras.layers.Dense(1, kernel_initializer="ones", use_bias=False),
            tfp.layers.VariationalGaussianProcess(
                num_inducing_points=VGP_INDUCING,
                kernel_provider=RBFKernelFn(),
                event_shape=[1],
                inducing_index_points_initializer=tf_keras.initializers.Constant(inducing),
                unconstrained_observation_noise_variance_initializer=(
                    tf_keras.initializers.Constant(VGP_NOISE_INIT))),
        ])
        kl_weight = REG_BATCH / len(x)

        def loss(y_true, rv_y):
            return rv_y.variational_loss(y_true, kl_weight=np.float64(kl_weight))

        model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate=REG_LR), loss=loss)
        start = time.perf_counter()
        model.fit(batches(x, y, REG_BATCH, epochs, seed, dtype="float64"), verbose=0)
        seconds = time.perf_counter() - start
        # Per-point predictive marginals N(mean, stddev^2) at the test inputs.
        yhat = model(x_test)
        return (*gaussian_scores(yhat.mean().numpy(), yhat.stddev().numpy(), y_test), seconds)
    finally:
        tf_keras.backend.set_floatx(previous)
