"""The zoo's one fit -> predict -> score routine, in the data's units.

Every experiment and the runner train and score through these functions:

    fit(model, x, y, epochs, batch_size)      model.fit with KL / N (KLScheduler)
    predict(model, x, num_samples, task)      tfp_bnn.predict's predictive distribution
    regression_scores(prediction, y, shift, scale)
    classification_scores(prediction, labels)
    score(model, x, y, task, ...)             predict, then the scores of the task
    fit_and_score(model, x_train, y_train, x_test, y_test, ...)

Regression is scored as Hernandez-Lobato and Adams (2015) and the papers
since: the prediction on standardised targets is mapped back to the data's
units (y = shift + scale * y_std, `RegressionPrediction.rescale`), then

    rmse            sqrt(mean (y - E[y])^2) of the predictive mean
    log_likelihood  mean_i log p(y_i | x_i, D) of the predictive mixture (nats)
    coverage_95     share of targets inside the central 95% interval
    mean_stddev     mean predictive standard deviation

Classification: accuracy, nll (nats), ece (15 equal-width bins) and brier
of the predictive probabilities (`tfp_bnn.metrics`).

Example:
>>> import zoo
>>> x = np.random.rand(40, 3).astype("float32")
>>> y = 10.0 + 2.0 * x.sum(axis=1)   # data units
>>> mean, std = y[:32].mean(), y[:32].std()
>>> model = zoo.build_model("mc_dropout_mlp", (3,), num_train=32, hidden_units=(8,))
>>> history, seconds = fit(model, x[:32], (y[:32] - mean) / std, epochs=1, batch_size=32)
>>> result, prediction = score(model, x[32:], y[32:], num_samples=10, shift=mean, scale=std)
>>> sorted(result)
['coverage_95', 'log_likelihood', 'mean_stddev', 'predict_seconds', 'rmse']
"""

import time

import keras
import numpy as np

import tfp_bnn
from tfp_bnn import _validation as check
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.data import shuffled_epochs
from tfp_bnn.data import steps_per_epoch
from tfp_bnn.modes import kl_layers
from tfp_bnn.predict import RegressionPrediction
from tfp_bnn.predict import engine

TASKS = ("regression", "classification")
NUM_BINS = 15


def sampling_free(model) -> bool:
    """Whether one deterministic pass gives `model`'s predictive distribution.

    True for a regressor trained by moment propagation (dvi_mlp, the
    transformer on its moments path: its outputs are the propagated mean and
    variance), also when wrapped to take raw inputs
    (`tfp_bnn.export.with_preprocessing` nests it in a functional model);
    every other ready model needs Monte Carlo samples.
    """
    nested = [layer for layer in getattr(model, "layers", []) if isinstance(layer, keras.Model)]
    return any(getattr(inner, "training_path", None) == "moments" for inner in [model] + nested)


def fit(model, x, y, epochs, batch_size=32, seed=None, callbacks=(), verbose=0,
        validation_data=None, seeded_batches=False):
    """`model.fit` on shuffled minibatches, with KL / N when the model has KL layers.

    Args:
        model: a compiled Keras model.
        x, y: training inputs and (standardised) targets.
        epochs, batch_size: positive ints.
        seed: None, or an int >= 0 given to `keras.utils.set_random_seed`
            right before `fit` (it seeds the shuffling and the noise).
        callbacks: more Keras callbacks, after the `KLScheduler`.
        verbose: Keras' fit verbosity.
        validation_data: passed to `fit`.
        seeded_batches: feed `tfp_bnn.data.shuffled_epochs` (each epoch's order from
            (seed, epoch); needs `seed`) instead of arrays with `shuffle=True`: one
            iterator for the whole run, which saves Keras' per-epoch set-up of an array
            input (~5x faster for a table of a few hundred rows on 2 cores).

    Returns:
        (History, seconds of the fit).
    """
    epochs = check.integer("epochs", epochs)
    batch_size = check.integer("batch_size", batch_size)
    if seed is not None:
        keras.utils.set_random_seed(check.seed(seed))
    # KLScheduler refuses a model without variational layers (MC dropout).
    scheduler = [KLScheduler(num_examples=len(x))] if kl_layers(model) else []
    feed = {"x": x, "y": y, "batch_size": batch_size, "shuffle": True}
    if seeded_batches:
        if seed is None:
            raise ValueError("`seeded_batches` needs a `seed` (the batches' order).")
        feed = {"x": shuffled_epochs(x, y, batch_size, seed, epochs), "shuffle": False,
                "steps_per_epoch": steps_per_epoch(len(x), batch_size)}
    begin = time.perf_counter()
    history = model.fit(**feed, epochs=epochs, verbose=verbose,
                        validation_data=validation_data, callbacks=scheduler + list(callbacks))
    return history, time.perf_counter() - begin


def _moment_prediction(model, x, batch_size):
    """One deterministic pass of a moment-path transformer with full covariances.

    Its outputs are [means (H), covariance (H * H)]; the predictive keeps
    the marginal variances (the diagonal).
    """
    outputs = model.predict(x, batch_size=batch_size or 256, verbose=0)
    horizon = model.horizon
    cov = outputs[:, horizon:].reshape(-1, horizon, horizon)
    return RegressionPrediction(outputs[None, :, :horizon],
                                np.diagonal(cov, axis1=1, axis2=2)[None])


def monte_carlo_samples(model, num_samples):
    """The T `predict` takes for `model` when asked for `num_samples`: 1 for a sampling-free
    model; for one whose layers map samples to M members (a deep ensemble, BatchEnsemble,
    Packed-Ensembles, SWAG's draws) M when nothing else is stochastic, else `num_samples`
    rounded up to a multiple of M; otherwise `num_samples`."""
    samples = 1 if sampling_free(model) else check.integer("num_samples", num_samples)
    members = engine.sample_multiple(model)
    if members > 1:
        stochastic = tfp_bnn.bayesian_layers(model)
        samples = -(-samples // members) * members if stochastic else members
    return samples


def predict(model, x, num_samples=100, task="regression", batch_size=None):
    """The predictive distribution of `model` at `x` and the seconds it took.

    Monte Carlo with T = `num_samples` weight samples (`tfp_bnn.predict`),
    or one pass (T = 1) for a sampling-free model. A deep ensemble of M
    deterministic members takes T = M (its exact mixture), one of Bayesian
    members `num_samples` rounded up to a multiple of M.

    Returns:
        (`RegressionPrediction` or `ClassificationPrediction`, seconds).
    """
    check.one_of("task", task, TASKS)
    samples = monte_carlo_samples(model, num_samples)
    begin = time.perf_counter()
    if task == "classification":
        prediction = tfp_bnn.predict.classification(model, x, num_samples=samples,
                                                    batch_size=batch_size)
    elif sampling_free(model) and getattr(model, "mode", None) == "full":
        prediction = _moment_prediction(model, x, batch_size)
    else:
        prediction = tfp_bnn.predict.regression(model, x, num_samples=samples,
                                                batch_size=batch_size)
    return prediction, time.perf_counter() - begin


def predict_in_data_units(model, x, x_scaler, y_scaler, num_samples=100):
    """The regression predictive at raw inputs `x`, in the target's units, of a model
    trained on data standardised by `x_scaler` and `y_scaler` (`tfp_bnn.data.Standardizer`s).
    """
    prediction, _ = predict(model, x_scaler.transform(x).astype("float32"), num_samples)
    return prediction.rescale(float(y_scaler.mean), float(y_scaler.std))


def regression_scores(prediction, y, shift=0.0, scale=1.0, level=0.95):
    """rmse, log_likelihood, coverage_95 and mean_stddev in the data's units.

    Args:
        prediction: a `RegressionPrediction` on standardised targets.
        y: the test targets in the data's units (not standardised).
        shift, scale: the standardisation, y = shift + scale * y_std.
        level: the interval of `coverage_95`.
    """
    rescaled = prediction.rescale(shift=shift, scale=scale)
    return {"rmse": float(rescaled.rmse(y)),
            "log_likelihood": float(np.mean(rescaled.log_likelihood(y))),
            "coverage_95": float(rescaled.coverage(y, level)),
            "mean_stddev": float(np.mean(np.sqrt(rescaled.total_variance)))}


def row_log_likelihoods(prediction, y, shift=0.0, scale=1.0):
    """(log-likelihood of each row [N] float64, rmse) in the data's units, of a
    `RegressionPrediction` on standardised targets (y, shift, scale as in
    `regression_scores`); the rows' mean is `regression_scores`' log_likelihood."""
    rescaled = prediction.rescale(shift=shift, scale=scale)
    rows = np.asarray(rescaled.log_likelihood(y), dtype=np.float64).reshape(-1)
    return rows, float(rescaled.rmse(y))


def classification_scores(prediction, labels, num_bins=NUM_BINS):
    """accuracy, nll (nats), ece (`num_bins` bins) and brier of a `ClassificationPrediction`."""
    return {"accuracy": float(prediction.accuracy(labels)),
            "nll": float(prediction.nll(labels)),
            "ece": float(prediction.ece(labels, num_bins=num_bins)),
            "brier": float(prediction.brier(labels))}


def score(model, x, y, task="regression", num_samples=100, shift=0.0, scale=1.0,
          batch_size=None):
    """Predicts `x` and scores it against `y` (data units; labels for classification).

    Returns:
        (scores dict with `predict_seconds`, prediction on standardised targets).
    """
    prediction, seconds = predict(model, x, num_samples, task, batch_size)
    if task == "classification":
        result = classification_scores(prediction, y)
    else:
        result = regression_scores(prediction, y, shift, scale)
    result["predict_seconds"] = seconds
    return result, prediction


def fit_and_score(model, x_train, y_train, x_test, y_test, epochs, batch_size=32,
                  num_samples=100, shift=0.0, scale=1.0, seed=None, callbacks=(),
                  predict_batch_size=None, task="regression", seeded_batches=False):
    """`fit` on the training split, then `score` on the test split.

    `y_test` is in the data's units; `shift` and `scale` map the model's
    standardised predictions to them; `seed` and `seeded_batches` as in `fit`.

    Returns:
        (scores dict with `train_seconds` and `predict_seconds`, prediction).
    """
    _, train_seconds = fit(model, x_train, y_train, epochs, batch_size, seed=seed,
                           callbacks=callbacks, seeded_batches=seeded_batches)
    result, prediction = score(model, x_test, y_test, task, num_samples, shift, scale,
                               batch_size=predict_batch_size)
    result["train_seconds"] = train_seconds
    return result, prediction
