"""The worked examples of `tfp_bnn.posteriors` and `tfp_bnn.priors`, run as written.

The example classes are executed from the module docstrings themselves, so
the documentation cannot drift from code that works: a posterior and a prior
of one's own, registered under another package, train in a DenseVariational
(and a DenseReparameterization) and survive a `.keras` round trip under
`safe_mode=True`.
"""

import os
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_bnn
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import DenseVariational
from tfp_bnn.testing.layer_test import run_bayesian_layer_test


def _run_example(module, namespace):
    doc = module.__doc__
    start = doc.index("    @keras.saving.register_keras_serializable")
    exec(textwrap.dedent(doc[start:]), namespace)  # noqa: S102 - our own docstring


_NAMESPACE = {"keras": keras, "np": np, "tf": tf, "tfd": tfp.distributions,
              "tfp_bnn": tfp_bnn}
_run_example(posteriors, _NAMESPACE)
_run_example(priors, _NAMESPACE)
SharedScaleNormal = _NAMESPACE["SharedScaleNormal"]
LearnedLaplacePrior = _NAMESPACE["LearnedLaplacePrior"]


def test_examples_are_registered_under_their_own_package():
    assert keras.saving.get_registered_name(SharedScaleNormal) == "my_project>SharedScaleNormal"
    assert keras.saving.get_registered_name(LearnedLaplacePrior) == \
        "my_project>LearnedLaplacePrior"


def test_examples_pass_the_standard_layer_checks():
    run_bayesian_layer_test(
        DenseVariational,
        {"units": 3, "kl_weight": 0.01, "posterior": SharedScaleNormal(),
         "prior": LearnedLaplacePrior(0.5)},
        (8, 4),
    )


@pytest.mark.parametrize("cls", [DenseVariational, DenseReparameterization])
def test_examples_train_save_and_load_safely(cls, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x @ rng.normal(size=(4, 1))).astype("float32")
    layer = cls(1, posterior=SharedScaleNormal(rho_init=-2.0), prior=LearnedLaplacePrior(0.5),
                kl_weight=1 / 64, seed=1)
    model = keras.Sequential([keras.Input((4,)), layer])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    names = sorted(v.path.split("/")[-1] for v in layer.trainable_variables)
    prior_name = "prior_rho" if cls is DenseVariational else "kernel_prior_rho"
    assert prior_name in names
    before = {v.path: v.numpy().copy() for v in layer.trainable_variables}
    history = model.fit(x, y, epochs=20, batch_size=64, verbose=0).history["loss"]
    assert history[-1] < history[0]
    for v in layer.trainable_variables:  # posterior loc, the shared rho, the prior's rho
        assert not np.allclose(v.numpy(), before[v.path]), f"{v.path} did not train"
    # The prior's learned scale enters the KL: its gradient is not zero.
    with tf.GradientTape() as tape:
        kl = layer.kl_divergence()
    prior_rho = next(v for v in layer.trainable_variables if v.path.endswith(prior_name))
    assert float(tf.abs(tape.gradient(kl, prior_rho))) > 0

    tfp_bnn.set_mean_mode(model)
    expected = model(x).numpy()
    path = os.path.join(tmp_path, "custom.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[0].posterior, SharedScaleNormal)
    assert loaded.layers[0].prior == LearnedLaplacePrior(0.5)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(loaded(x).numpy(), expected)
