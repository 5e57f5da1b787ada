"""Post-hoc calibrated digits CNNs: a deterministic CNN with a temperature fitted on held-out
training digits (Guo et al. 2017), a row of the covariate-shift comparison
(`zoo.experiments.covariate_shift`).

Calibration needs rows the network was not trained on: `temperature_cnn` holds out a
stratified CALIBRATION_FRACTION of the training digits (seeded), trains
`zoo.models.digits.deterministic_cnn` on the rest exactly as the deterministic row trains
(same epochs, batch and seed), fits `tfp_bnn.calibration.TemperatureScaling` on the
held-out logits, and returns the network with the fitted layer appended
(`tfp_bnn.calibration.calibrated`). Its network therefore saw 80% of the training digits
where the deterministic row's saw all of them; that is the price of calibrating, and the
comparison keeps it.

Example:
>>> data = tfp_bnn.data.load_digits(seed=0)
>>> small = {key: values[:120] for key, values in data.items()}   # the benchmark: all, 60 epochs
>>> trained = temperature_cnn(small, epochs=1, seed=0, filters=(4, 8), hidden_units=(16,))
>>> sorted(trained.details)
['calibration_rows', 'posthoc_seconds', 'temperature']
"""

import time

import tfp_bnn
from tfp_bnn.data.digits import stratified_split
from zoo.models import digits as digits_models

CALIBRATION_FRACTION = 0.2


def temperature_cnn(data, epochs=digits_models.EPOCHS, batch_size=digits_models.BATCH_SIZE,
                    seed=0, calibration_fraction=CALIBRATION_FRACTION, **overrides):
    """Trainer: the deterministic CNN on part of the training digits, then temperature
    scaling fitted on the rest.

    Args:
        data: dict with `x_train` and `y_train`.
        epochs, batch_size, seed: as `zoo.models.digits.train`; `seed` also draws the
            held-out digits.
        calibration_fraction: in (0, 1), the share of each class held out for the fit.
        **overrides: `deterministic_cnn` arguments (filters, hidden_units, ...).

    Returns:
        `zoo.models.digits.Trained`: the calibrated model (logits out), the CNN's History,
        details `temperature`, `calibration_rows` and `posthoc_seconds` (the fit).
    """
    for key in ("x_train", "y_train"):
        if key not in data:
            raise ValueError(f"`data` needs the key {key!r}; it has {sorted(data)}.")
    fit, held_out = stratified_split(data["y_train"], test_fraction=calibration_fraction,
                                     seed=seed)
    part = {"x_train": data["x_train"][fit], "y_train": data["y_train"][fit]}
    stage1 = digits_models.BuildAndTrain(digits_models.deterministic_cnn, **overrides)(
        part, epochs=epochs, batch_size=batch_size, seed=seed)
    begin = time.perf_counter()
    scaling = tfp_bnn.calibration.TemperatureScaling().fit_predictive(
        stage1.model, data["x_train"][held_out], data["y_train"][held_out], num_samples=1)
    return digits_models.Trained(
        tfp_bnn.calibration.calibrated(stage1.model, scaling), stage1.history,
        {"temperature": scaling.temperature, "calibration_rows": int(len(held_out)),
         "posthoc_seconds": time.perf_counter() - begin})
