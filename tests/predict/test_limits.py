"""Every size a prediction's caller controls is checked before any model call.

`num_samples`, `batch_size`, `samples_per_call`, `max_rows` and the
[T, N, ...] results the front ends keep are refused (or clamped to a stated
limit) with one line, before the model's Monte Carlo runner is even built:
`engine._RUNNERS` holding no runner for the model proves no call was made.
"""

import time

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import _memory
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import IndependentNormal
from tfp_bnn.predict import engine
from tfp_bnn.predict import limits
from tfp_bnn.predict.distribution import MAX_KEPT_CALLS

X = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")


def _model(units=2, head=None):
    layers = [keras.Input((3,)), DenseFlipout(units, kl_weight=0.0, seed=0)]
    if head is not None:
        layers.append(head)
    return keras.Sequential(layers)


def _refused_before_any_call(call, model, problem):
    start = time.monotonic()
    with pytest.raises(ValueError, match=problem) as info:
        call()
    assert "\n" not in str(info.value)
    assert time.monotonic() - start < 5
    assert model not in engine._RUNNERS, "a runner was built: work started before the check"


@pytest.mark.jax
@pytest.mark.parametrize(
    "predict",
    [
        lambda m, x, t: tfp_bnn.predict.sample(m, x, num_samples=t),
        lambda m, x, t: tfp_bnn.predict.regression(m, x, num_samples=t),
        lambda m, x, t: tfp_bnn.predict.classification(m, x, num_samples=t, keep_samples=True),
    ],
    ids=["sample", "regression", "classification_keep_samples"],
)
def test_results_too_large_for_memory_are_refused_up_front(predict):
    model = _model(units=2)
    x = np.zeros((10**6, 3), "float32")  # T * N = 10^12 results: terabytes
    _refused_before_any_call(lambda: predict(model, x, 10**6), model,
                             r"of shape \(.*1000000, 1000000, .*\) would need .* GiB, over half "
                             r"of this machine's memory")


@pytest.mark.jax
def test_distribution_results_too_large_are_refused_up_front():
    model = _model(units=2, head=IndependentNormal(1))
    x = np.zeros((10**6, 3), "float32")
    _refused_before_any_call(lambda: tfp_bnn.predict.distribution(model, x, 10**6), model,
                             r"The sampled means and variances of shape \(2, 1000000, "
                             r"1000000, 1\) would need")


@pytest.mark.jax
def test_static_output_size_enters_the_up_front_check(monkeypatch):
    """2 copies * T * N * D float64 values with D read from the model's output shape."""
    model = _model(units=64)
    needed = 2 * 100 * 8 * 32 * 8  # mean_log_variance: 32 means and 32 log variances
    monkeypatch.setattr(_memory, "memory_bytes", lambda: 2 * needed - 2)
    _refused_before_any_call(lambda: tfp_bnn.predict.regression(model, X, num_samples=100),
                             model, r"of shape \(2, 100, 8, 32\)")
    monkeypatch.setattr(_memory, "memory_bytes", lambda: 2 * needed)
    assert tfp_bnn.predict.regression(model, X, num_samples=100).mean.shape == (8, 32)


@pytest.mark.jax
def test_max_rows_over_the_limit_is_refused():
    model = _model()
    _refused_before_any_call(
        lambda: tfp_bnn.predict.sample(model, X, num_samples=3, max_rows=10**12), model,
        r"`max_rows` must be an int in 1..4,194,304, got 1000000000000")


@pytest.mark.jax
def test_tiled_rows_per_call_over_the_limit_are_refused():
    model = _model()
    x = np.zeros((1024, 3), "float32")
    _refused_before_any_call(
        lambda: tfp_bnn.predict.sample(model, x, num_samples=10**6, samples_per_call=10**6),
        model, r"`samples_per_call` \* `batch_size` = 1,000,000 \* 1,024 = 1,024,000,000 "
               r"tiled rows per call, over the limit of 4,194,304")


@pytest.mark.jax
def test_tiled_inputs_too_large_for_memory_are_refused(monkeypatch):
    model = _model()
    monkeypatch.setattr(_memory, "memory_bytes", lambda: 2 * 4096)  # 4 KiB usable
    # 100 samples * 8 inputs * 3 float32 = 9,600 bytes of tiled inputs per call.
    _refused_before_any_call(
        lambda: tfp_bnn.predict.classification(model, X, num_samples=100, samples_per_call=100),
        model, r"The inputs tiled 100 times per call \(800 rows\) would need .* GiB, over half "
               r"of this machine's memory .*; pass a smaller `samples_per_call` or `batch_size`")


@pytest.mark.jax
def test_too_many_kept_distributions_are_refused():
    model = _model(units=2, head=IndependentNormal(1))
    x = np.zeros((1000, 3), "float32")
    _refused_before_any_call(
        lambda: tfp_bnn.predict.distribution(model, x, num_samples=1000, samples_per_call=1,
                                             batch_size=1), model,
        rf"1,000,000 calls \(1,000 samples in chunks of 1, 1,000 inputs in batches of 1\) are "
        rf"over the limit of {MAX_KEPT_CALLS:,}")


@pytest.mark.jax
def test_huge_samples_per_call_and_batch_size_are_clamped():
    """To num_samples and to N: one call of 5 * 8 rows, and correct results."""
    model = _model()
    samples = tfp_bnn.predict.sample(model, X, num_samples=5, samples_per_call=10**12,
                                     batch_size=10**12)
    assert samples.shape == (5, 8, 2)
    assert limits.plan(5, [X], 8, 10**12, 10**12) == (5, 8, 5)


@pytest.mark.jax
def test_plan_checks_every_argument_before_work():
    for kwargs, problem in [
        ({"batch_size": 2**70}, None),
        ({"samples_per_call": True}, r"`samples_per_call` must be a positive int, got True"),
        ({"max_rows": 1.5}, r"`max_rows` must be an int in 1..4,194,304, got 1.5"),
        ({"batch_size": -3}, r"`batch_size` must be a positive int, got -3"),
    ]:
        if problem is None:
            assert limits.plan(4, [X], 8, **kwargs)[1] == 8
            continue
        with pytest.raises(ValueError, match=problem):
            limits.plan(4, [X], 8, **kwargs)


@pytest.mark.jax
def test_call_count_needs_no_list_of_chunks():
    """Counting and chunking are O(1) in memory whatever T / samples_per_call is."""
    assert limits.count_calls(10**6, 10**6, 1, 1) == 10**12
    chunks = limits.sample_chunks(10**6, 1)
    assert next(chunks) == 1 and not isinstance(chunks, (list, tuple))
