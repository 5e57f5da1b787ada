"""Conformal intervals for `auto`'s kept model, calibrated on the refit's guard rows.

The guarded refit (`zoo.run.auto_refit`) leaves a guard slice of the training rows out of
its training; those rows are the calibration set of a split conformal regressor
(`tfp_bnn.conformal.SplitConformalRegressor`, score |y - mu| / sigma with sigma the kept
model's predictive sd) whose 1 - CONFORMAL_ALPHA intervals are then scored on the test
rows beside the model's own central interval of the same level. For test rows exchangeable
with the guard rows, the conformal interval covers with probability >= 1 - alpha.

Caveat: where the guard replaced the refit by the search's own model, that model was
early-stopped on the validation rows the guard slice belongs to (not trained on them): its
scores there are slightly optimistic, so its intervals may cover a little less.
"""

import numpy as np

from tfp_bnn import conformal

CONFORMAL_ALPHA = 0.1


def conformal_scores(stack, x_guard, y_guard, test_prediction, y_test, num_samples,
                     alpha=CONFORMAL_ALPHA):
    """Coverage and mean width on the test rows of the conformal and the model's intervals.

    Args:
        stack: the kept `zoo.run.auto_stack.Stack` (its `predict` takes raw inputs).
        x_guard, y_guard: the raw guard rows and targets (not trained on by the stack).
        test_prediction: the stack's predictive at the test rows, in data units.
        y_test: the raw test targets.
        num_samples: T of the guard rows' predictive.
        alpha: miscoverage level.

    Returns:
        dict: calibration_rows, level, conformal_coverage, conformal_width,
        model_coverage, model_width (the model's central interval of the same level); or
        None when the guard rows are too few for a finite interval at this level.
    """
    if len(y_guard) < conformal.minimum_calibration_size(alpha):
        return None
    guard_prediction = stack.predict(x_guard, num_samples)
    regressor = conformal.SplitConformalRegressor.from_prediction(
        guard_prediction, y_guard, alpha=alpha, score="normalized")
    lower, upper = regressor.interval(test_prediction)
    model_lower, model_upper = (np.asarray(bound, np.float64).reshape(-1)
                                for bound in test_prediction.interval(1.0 - alpha))
    return {"calibration_rows": int(len(y_guard)), "level": 1.0 - alpha,
            "conformal_coverage": conformal.coverage(y_test, lower, upper),
            "conformal_width": conformal.mean_width(lower, upper),
            "model_coverage": conformal.coverage(y_test, model_lower, model_upper),
            "model_width": conformal.mean_width(model_lower, model_upper)}
