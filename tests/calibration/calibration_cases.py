"""Shared data and an independent SciPy reference of the calibration tests.

The reference NLL is written from the definition with scipy.special (log_softmax,
logsumexp), apart from `tfp_bnn.calibration._objective`, and minimised by SciPy's L-BFGS-B
with its own finite-difference gradients.
"""

import numpy as np
from scipy import optimize
from scipy import special


def overconfident(rows=600, classes=4, samples=1, seed=0, sharpness=4.0):
    """(logits [S, N, K], labels [N]): labels drawn from softmax(z), logits given x sharpness
    (overconfident), a per-class bias added, and S jittered copies (a Monte Carlo spread)."""
    rng = np.random.default_rng(seed)
    true = rng.normal(size=(rows, classes))
    probs = special.softmax(true, axis=1)
    labels = np.array([rng.choice(classes, p=p) for p in probs])
    logits = sharpness * true + np.linspace(-1.0, 1.0, classes)
    logits = logits[None] + 0.5 * rng.normal(size=(samples, rows, classes))
    return logits, labels


def reference_nll(mapped, labels):
    """-(1/N) sum_i log (1/S) sum_s softmax(mapped_s)_i[y_i]."""
    picked = special.log_softmax(mapped, axis=-1)[:, np.arange(len(labels)), labels]
    return float(-np.mean(special.logsumexp(picked, axis=0) - np.log(mapped.shape[0])))


def scipy_minimum(function, start):
    result = optimize.minimize(function, np.asarray(start, dtype=np.float64),
                               method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-10,
                                                           "maxiter": 5000})
    return result.x, float(result.fun)


def run_keras_layer_test(cls, init, width, weights):
    """Keras 3's own `run_layer_test` for a calibration layer: inputs [2, width], the same
    shape out, `weights` non-trainable weights and nothing else (no training check: none
    of them has a trainable weight)."""
    from keras.src import testing
    testing.TestCase().run_layer_test(
        cls, init, input_shape=(2, width), expected_output_shape=(2, width),
        expected_num_trainable_weights=0, expected_num_non_trainable_weights=weights,
        expected_num_seed_generators=0, expected_num_losses=0, supports_masking=False,
        run_training_check=False)


def assert_saved_model_computes_the_same(model, inputs, path):
    """Saves `model` to `path`, loads it in safe mode, and compares the outputs at `inputs`
    to the bit; returns the loaded model."""
    import keras
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(inputs)),
                                  keras.ops.convert_to_numpy(model(inputs)))
    return loaded
