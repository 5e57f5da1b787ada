"""tfp_bnn._tf: the package imports, trains, predicts and saves on JAX without TensorFlow.

The GPU machines this library must run on can have JAX with CUDA and no
TensorFlow build. A subprocess on Keras' JAX backend, where any import of
`tensorflow` raises, imports the whole package and uses the ported core.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tfp_bnn import _tf

PROGRAM = textwrap.dedent("""
    import sys

    class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, NoTensorFlow())
    import os
    import numpy as np
    import keras
    import tfp_bnn

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype("float32")
    y = 2 * x[:, :1] + 0.1 * rng.normal(size=(64, 1)).astype("float32")
    model = keras.Sequential([
        keras.Input((5,)),
        tfp_bnn.layers.DenseFlipout(8, activation="relu", seed=1),
        tfp_bnn.layers.DenseReparameterization(1, posterior="flow", seed=2),
    ])
    model.compile("adam", "mse")
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0,
                        callbacks=[tfp_bnn.callbacks.KLScheduler(num_examples=64)])
    prediction = tfp_bnn.predict.regression(model, x, num_samples=4, output="mean",
                                            noise_variance=0.01)
    head = keras.Sequential([keras.Input((5,)), tfp_bnn.layers.DenseFlipout(2, seed=3),
                             tfp_bnn.layers.IndependentNormal(1)])
    log_likelihood = tfp_bnn.predict.distribution(head, x, num_samples=4).log_likelihood(y)
    path = os.path.join(sys.argv[1], "model.keras")
    model.save(path)
    loaded = tfp_bnn.load_model(path)
    with tfp_bnn.mean_mode(model), tfp_bnn.mean_mode(loaded):
        same = np.allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    print(keras.backend.backend(), sorted(history.history), prediction.mean.shape,
          log_likelihood.shape, same, "tensorflow" in sys.modules)
""")


@pytest.mark.slow
def test_the_core_runs_on_jax_where_tensorflow_cannot_be_imported(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == (
        "jax ['data_loss', 'kl', 'kl_weight', 'loss'] (64, 1) (64,) True False")


def test_tensorflow_loads_on_first_use_and_tensors_are_recognised():
    # This test process has TensorFlow (the suite's conftest imports it).
    lazy = _tf.LazyModule("tensorflow")
    assert "imported on first use" in repr(lazy)
    assert _tf.loaded()
    assert lazy.float32 is _tf.tf.float32
    assert _tf.is_tensor(_tf.tf.constant([1.0]))
    assert not _tf.is_tensor(np.ones(2))
    with pytest.raises(AttributeError):
        _ = lazy.no_such_attribute
