"""Bayesian digits CNNs made from a trained deterministic one: MOPED conversion and Laplace.

Two-stage models of the covariate-shift comparison (`zoo.experiments.covariate_shift`).
Stage 1 is `zoo.models.digits.deterministic_cnn` trained by `zoo.models.digits.train`
exactly as the deterministic row (same seed, same weights); stage 2 makes it Bayesian:

- `bayesianized_cnn`: `tfp_bnn.bayesianize` turns every Conv2D and Dense into its Flipout
  counterpart with MOPED weights (Krishnan, Subedar and Tickoo 2020, AAAI): prior
  N(w, prior_scale^2) centred on the trained weights w, posterior starting at
  N(w, (delta |w|)^2); then a short fine-tuning of the per-example ELBO, mean NLL + KL / N
  (`KLScheduler` through `train`).
- `laplace_cnn`: a post-hoc last-layer Laplace approximation
  (`tfp_bnn.laplace.LastLayerLaplace`; Daxberger et al. 2021, "Laplace Redux", NeurIPS)
  over the logits layer's 65 x 10 weights, prior precision by the marginal likelihood; the
  model returned is its `predictive_model()`, whose `LaplaceDense` head `tfp_bnn.predict`
  samples like any stochastic layer.

Both are trainers (they return a `zoo.models.digits.Trained`): called as `trainer(data,
epochs=, batch_size=, seed=)`, `epochs` being stage 1's; `pretrained=` hands them a stage 1
already trained (the covariate-shift script passes its `deterministic_cnn` row's, so the
three rows share one network per seed). `DELTA`, `FINETUNE_EPOCHS` and `HESSIAN` were chosen
on a validation cut of the training digits (`zoo.experiments.posthoc_tuning`,
BENCHMARKS.md).

Example:
>>> data = tfp_bnn.data.load_digits(seed=0)
>>> small = {key: values[:64] for key, values in data.items()}   # the benchmark: all, 60 epochs
>>> trained = laplace_cnn(small, epochs=1, seed=0, filters=(4, 8), hidden_units=(16,))
>>> sorted(trained.details)
['posthoc_seconds', 'prior_precision']
"""

import time

import tfp_bnn
from tfp_bnn import _validation as check
from zoo.models import _common
from zoo.models import digits as digits_models

METHOD = "flipout"
# The initial posterior scale relative to |w| and the fine-tuning epochs of the ELBO,
# chosen on validation digits (`zoo.experiments.posthoc_tuning`, two grids in BENCHMARKS.md:
# shifted validation NLL 0.689, against 0.770 for the conversion alone and 1.048 for the
# deterministic CNN).
DELTA = 0.3
FINETUNE_EPOCHS = 10
# MOPED's prior width around the trained weights (bayesian-torch's MOPED examples use 1.0).
PRIOR_SCALE = 1.0
FINETUNE_LEARNING_RATE = _common.LEARNING_RATE
# KFAC, chosen on the same validation digits over the exact GGN of the 650 last-layer
# weights ("full"): shifted validation NLL 0.802 against 1.072, clean 0.251 against 0.577.
HESSIAN = "kron"


def _stage1(data, epochs, batch_size, seed, pretrained, overrides):
    """Stage 1: `pretrained`, or the deterministic CNN trained exactly as its own row."""
    if pretrained is None:
        return digits_models.BuildAndTrain(digits_models.deterministic_cnn, **overrides)(
            data, epochs=epochs, batch_size=batch_size, seed=seed)
    if not isinstance(pretrained, digits_models.Trained):
        raise ValueError("`pretrained` must be the zoo.models.digits.Trained of stage 1, got "
                         f"{type(pretrained).__name__}.")
    if overrides:
        raise ValueError(f"`pretrained` is already built: builder overrides {sorted(overrides)} "
                         "would not apply.")
    return pretrained


def moped_finetune(model, data, delta=DELTA, epochs=FINETUNE_EPOCHS,
                   batch_size=digits_models.BATCH_SIZE, seed=0, method=METHOD,
                   prior_scale=PRIOR_SCALE, learning_rate=FINETUNE_LEARNING_RATE):
    """Stage 2 of `bayesianized_cnn`: `bayesianize` a trained classifier, fine-tune the ELBO.

    Args:
        model: a trained functional or Sequential classifier with logits output.
        data: dict with `x_train` and `y_train`.
        delta: > 0, MOPED's initial posterior scale relative to |w|.
        epochs: int >= 0 fine-tuning epochs (0: the converted model as it starts).
        batch_size, seed: as `zoo.models.digits.train`; `seed` also seeds the weight noise.
        method: "flipout" or "reparameterization".
        prior_scale: > 0, the prior's standard deviation around the trained weights.
        learning_rate: > 0, Adam's for the fine-tuning.

    Returns:
        (the Bayesian model, compiled; the fine-tuning History or None for 0 epochs).
    """
    epochs = check.integer("epochs", epochs, minimum=0)
    seed = check.seed(seed)
    bnn = tfp_bnn.bayesianize(model, method=method, delta=delta, prior_scale=prior_scale,
                              seed=seed)
    _common.compile_model(bnn, "classification", learning_rate, None)
    if epochs == 0:
        return bnn, None
    return bnn, digits_models.train(bnn, data, epochs=epochs, batch_size=batch_size,
                                    seed=seed)


def laplace_head(model, data, hessian=HESSIAN, seed=0):
    """Stage 2 of `laplace_cnn`: last-layer Laplace of a trained classifier, evidence-tuned.

    Args:
        model: a trained classifier whose logits come from a `keras.layers.Dense`.
        data: dict with `x_train` and `y_train` (one pass over them).
        hessian: "full" or "kron" (KFAC).
        seed: int >= 0 or None, seeds the head's weight draws.

    Returns:
        (the predictive model, the fitted `LastLayerLaplace`, seconds of fit + evidence).
    """
    begin = time.perf_counter()
    laplace = tfp_bnn.laplace.LastLayerLaplace(model, "classification", hessian=hessian)
    laplace.fit(data["x_train"], data["y_train"])
    laplace.optimize_prior_precision()
    seconds = time.perf_counter() - begin
    return laplace.predictive_model(seed=seed), laplace, seconds


def bayesianized_cnn(data, epochs=digits_models.EPOCHS, batch_size=digits_models.BATCH_SIZE,
                     seed=0, pretrained=None, delta=DELTA, finetune_epochs=FINETUNE_EPOCHS,
                     method=METHOD, prior_scale=PRIOR_SCALE,
                     learning_rate=FINETUNE_LEARNING_RATE, **overrides):
    """Trainer: the deterministic CNN, then MOPED `bayesianize` and `finetune_epochs` of ELBO.

    Args:
        data: dict with `x_train` and `y_train`.
        epochs, batch_size, seed: stage 1's, as `zoo.models.digits.train`; the fine-tuning
            uses the same batch size and seed.
        pretrained: None (train stage 1 here), or the `Trained` of `deterministic_cnn` on
            the same data, epochs, batch size and seed (it is not modified).
        delta, finetune_epochs, method, prior_scale, learning_rate: as `moped_finetune`.
        **overrides: `deterministic_cnn` arguments (filters, hidden_units, ...).

    Returns:
        `zoo.models.digits.Trained`: the fine-tuned model, the fine-tuning History (stage
        1's with 0 fine-tuning epochs), details `posthoc_seconds` (conversion and
        fine-tuning), `delta` and `finetune_epochs`.
    """
    stage1 = _stage1(data, epochs, batch_size, seed, pretrained, overrides)
    begin = time.perf_counter()
    bnn, history = moped_finetune(stage1.model, data, delta=delta, epochs=finetune_epochs,
                                  batch_size=batch_size, seed=seed, method=method,
                                  prior_scale=prior_scale, learning_rate=learning_rate)
    return digits_models.Trained(bnn, stage1.history if history is None else history,
                                 {"posthoc_seconds": time.perf_counter() - begin,
                                  "delta": delta, "finetune_epochs": finetune_epochs})


def laplace_cnn(data, epochs=digits_models.EPOCHS, batch_size=digits_models.BATCH_SIZE,
                seed=0, pretrained=None, hessian=HESSIAN, **overrides):
    """Trainer: the deterministic CNN, then a last-layer Laplace posterior (no retraining).

    Args:
        data: dict with `x_train` and `y_train`.
        epochs, batch_size, seed: stage 1's, as `zoo.models.digits.train`; `seed` also
            seeds the Laplace head's weight draws.
        pretrained: as `bayesianized_cnn`; the predictive model shares its feature layers.
        hessian: "full" or "kron", see `laplace_head`.
        **overrides: `deterministic_cnn` arguments (filters, hidden_units, ...).

    Returns:
        `zoo.models.digits.Trained`: the predictive model, stage 1's History, details
        `posthoc_seconds` (GGN pass + evidence maximisation) and `prior_precision`.
    """
    stage1 = _stage1(data, epochs, batch_size, seed, pretrained, overrides)
    predictive, laplace, seconds = laplace_head(stage1.model, data, hessian=hessian,
                                                seed=seed)
    return digits_models.Trained(predictive, stage1.history,
                                 {"posthoc_seconds": seconds,
                                  "prior_precision": float(laplace.prior_precision)})
