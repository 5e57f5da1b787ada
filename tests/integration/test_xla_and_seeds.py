"""XLA compilation for every layer, and seeded reproducibility of a training run."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfp_bnn import set_mean_mode
from tfp_bnn.callbacks import KLScheduler
from tests.integration.seeded_run import CONV
from tests.integration.seeded_run import DENSE
from tests.integration.seeded_run import build_model
from tests.integration.seeded_run import make_data
from zoo.models import registry

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "cls", DENSE + CONV, ids=lambda c: c.__name__
)
def test_fit_and_predict_with_jit_compile(cls):
    x, y = make_data(cls)
    model = build_model(cls, 0)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[KLScheduler(64)])
    assert model.jit_compile is True  # Keras falls back silently when a layer cannot compile
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["kl"][0] > 0
    set_mean_mode(model)
    a, b = model.predict(x, verbose=0), model.predict(x, verbose=0)
    np.testing.assert_array_equal(a, b)


# Both seeded checks run in one fresh process (one TensorFlow start-up for
# the two): every zoo model on one thread, as `python -m zoo train` runs by
# default, then every layer with TensorFlow's op determinism on. Both
# settings are process-wide (op determinism also turns XLA off in Keras), so
# they stay out of this test process; one thread must be set before
# TensorFlow's first op, op determinism may come later. Each model is built
# and traced once and trained twice from the same state
# (`seeded_run.twice_from_one_state`: tracing, not the 6 steps, is the cost).
SEEDED_SCRIPT = r"""
import json
import numpy as np
from zoo.run import runner
runner.set_threads(1)
import keras
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.data import shuffled_epochs, steps_per_epoch
from tfp_bnn.modes import kl_layers
import zoo
from tests.integration import seeded_run

def train(model, x, y):
    keras.utils.set_random_seed(4)
    callbacks = [KLScheduler(48)] if kl_layers(model) else []
    history = model.fit(shuffled_epochs(x, y, 16, 4, 2), epochs=2, shuffle=False,
                        steps_per_epoch=steps_per_epoch(48, 16), verbose=0,
                        callbacks=callbacks)
    weights = b"".join(np.asarray(w).tobytes() for w in model.get_weights())
    return {k: [float(v) for v in values] for k, values in history.history.items()}, \
        weights.hex()

report = {}
for name in zoo.list_models():
    spec = zoo.get_spec(name)
    task = spec.tasks[0]
    shape = {"table": (5,), "image": (8, 8, 1), "sequence": (6, 3)}[spec.inputs[0]]
    classes = 3 if task == "classification" else None
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48,) + shape).astype("float32")
    y = rng.integers(0, classes, 48) if task == "classification" else x.reshape(48, -1)[:, :1]
    # Two ensemble members show the same-seed property as well as the default five
    # (tests/zoo/models/test_ensemble.py builds those).
    options = {"num_members": 2} if name == "deep_ensemble" else {}
    keras.utils.set_random_seed(4)
    model = zoo.build_model(name, shape, task=task, num_classes=classes, num_train=48,
                            seed=4, **options)
    first, second = seeded_run.twice_from_one_state(model, lambda m: train(m, x, y))
    report[name] = {"history": first[0], "same_history": first[0] == second[0],
                    "same_weights": first[1] == second[1]}
print("ZOO " + json.dumps(report), flush=True)

seeded_run.main()  # op determinism on; prints the layers' JSON report last
"""


@pytest.fixture(scope="module")
def seeded_reports():
    """(zoo models' report, layers' report) of the one fresh seeded process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", SEEDED_SCRIPT], capture_output=True,
                            text=True, timeout=900, cwd=REPO_ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    zoo_line = [x for x in lines if x.startswith("ZOO ")][-1]
    return json.loads(zoo_line[len("ZOO "):]), json.loads(lines[-1])


@pytest.mark.slow
def test_every_zoo_model_trains_deterministically_on_one_thread(seeded_reports):
    report, _ = seeded_reports
    assert sorted(report) == sorted(registry.list_models())
    for name, entry in report.items():
        assert entry["same_history"] and entry["same_weights"], name
        assert len(entry["history"]["loss"]) == 2
        assert all(np.isfinite(entry["history"]["loss"])), name


@pytest.mark.slow
def test_same_seed_gives_an_identical_training_run(seeded_reports):
    """Two training runs from the same seeds are bit-identical, for every layer.

    TensorFlow's op determinism is on for this part (the process also runs
    on one thread, for the zoo's check): without either, multi-threaded CPU
    kernels may add floats in a different order from run to run (a 1-ulp
    weight difference after 12 steps was seen here).
    """
    _, report = seeded_reports
    assert sorted(report) == sorted(c.__name__ for c in DENSE + CONV)
    assert report == {name: "identical" for name in report}
