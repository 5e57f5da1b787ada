"""`python -m zoo` (no subcommand): Bayes by Backprop on UCI concrete, scored as the papers do.

One seeded 90/10 split of the embedded concrete data; inputs and target
standardised with training statistics only; the default `bbb_mlp` trained on
the per-example ELBO (mean NLL + KL / N); then T Monte Carlo forward passes
on the test split, scored by the RMSE of the predictive mean and the
log-likelihood of the predictive mixture, both in the target's original
units (MPa), as in Hernandez-Lobato and Adams (2015) and Gal and Ghahramani
(2016). For reference, their concrete numbers (mean over 20 splits): VI
RMSE 7.19, MC dropout RMSE 5.23.
"""

import math
import sys
import time

from zoo.run import flags

EPOCHS = 600
BATCH_SIZE = 32
NUM_SAMPLES = 100
# Progress lines per run: enough to see training move, few enough to read.
NUM_PROGRESS_LINES = 6


# TensorFlow, Keras and tfp_bnn are imported inside the functions: `main`
# reads and checks its arguments before TensorFlow starts.
def prepare_concrete(seed):
    """The split and the train-only standardisation of concrete.

    Returns:
        dict with `x_train`, `y_train`, `x_test`, `y_test` (standardised,
        float32) and `y_scaler`, the target's `Standardizer`.
    """
    from tfp_bnn.data import Standardizer  # noqa: PLC0415
    from tfp_bnn.data import load_concrete  # noqa: PLC0415
    from tfp_bnn.data import train_test_split  # noqa: PLC0415

    x, y = load_concrete()
    train, test = train_test_split(len(x), test_fraction=0.1, seed=seed)
    x_scaler = Standardizer().fit(x[train])
    y_scaler = Standardizer().fit(y[train])
    return {
        "x_train": x_scaler.transform(x[train]),
        "y_train": y_scaler.transform(y[train]),
        "x_test": x_scaler.transform(x[test]),
        "y_test": y_scaler.transform(y[test]),
        "y_scaler": y_scaler,
    }


def run(epochs=EPOCHS, seed=0, num_samples=NUM_SAMPLES, batch_size=BATCH_SIZE):
    """Trains and scores the default BBB MLP on concrete; prints progress.

    Returns:
        dict with `rmse` and `log_likelihood` (test, original units),
        `seconds` (wall time), `num_train` and `num_test`.
    """
    import keras  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from zoo.models.bbb import bbb_mlp  # noqa: PLC0415
    from zoo.run import scoring  # noqa: PLC0415
    from zoo.run.progress import PlainProgress  # noqa: PLC0415

    start = time.perf_counter()
    # Seeds Python, NumPy and TF (the initial weights); `fit` seeds again
    # before training, and each epoch's minibatch order comes from (seed, epoch).
    keras.utils.set_random_seed(seed)
    data = prepare_concrete(seed)
    num_train = len(data["x_train"])
    steps_per_epoch = math.ceil(num_train / batch_size)
    model = bbb_mlp(
        data["x_train"].shape[1:],
        num_train=num_train,
        hidden_units=(50, 50),
        learning_rate=3e-3,
        heteroscedastic=True,
        decay_steps=epochs * steps_per_epoch,
        seed=seed,
    )
    print(
        f"bbb_mlp on concrete: {num_train} train / {len(data['x_test'])} test, "
        f"{epochs} epochs, batch {batch_size}, seed {seed}",
        flush=True,
    )
    every = max(1, epochs // NUM_PROGRESS_LINES)
    # T weight samples drawn inside traced calls (tfp_bnn.predict), mapped back
    # to MPa so that RMSE and log-likelihood are in the data's units.
    scaler = data["y_scaler"]
    y_test = scaler.inverse_transform(data["y_test"]).reshape(-1, 1)
    scores, _ = scoring.fit_and_score(
        model, data["x_train"], data["y_train"], data["x_test"], y_test, epochs, batch_size,
        num_samples, shift=float(np.ravel(scaler.mean)[0]),
        scale=float(np.ravel(scaler.std)[0]), seed=seed, seeded_batches=True,
        callbacks=[PlainProgress(epochs, every=every, start=start)])
    return {
        "rmse": scores["rmse"],
        "log_likelihood": scores["log_likelihood"],
        "coverage_95": scores["coverage_95"],
        "seconds": time.perf_counter() - start,
        "num_train": num_train,
        "num_test": len(data["x_test"]),
    }


def build_parser():
    return flags.run_parser(
        "python -m zoo",
        "Train the Bayes-by-Backprop MLP on UCI concrete (one seeded 90/10 split) and print "
        "test RMSE and log-likelihood in MPa.", EPOCHS, NUM_SAMPLES, "training epochs",
        "seed of the split, the weights and the noise", "Monte Carlo forward passes at test time")


def main(argv=None):
    """Entry point of `python -m zoo`; returns the process exit code.

    Args:
        argv: the command-line arguments (default `sys.argv[1:]`).

    Returns:
        0 on success; bad arguments exit with code 2 and one error line.

    Example:
    >>> main(["--epochs", "1", "--samples", "5"])   # the default job: many epochs, T = 100
    bbb_mlp on concrete: 927 train / 103 test, 1 epochs, batch 32, seed 0
    ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    flags.check_run_flags(parser, args)
    flags.start_tensorflow_quietly()
    result = run(epochs=args.epochs, seed=args.seed, num_samples=args.samples)
    print(
        f"test RMSE {result['rmse']:.3f} MPa  "
        f"test log-likelihood {result['log_likelihood']:.3f} nats  "
        f"({args.samples} MC samples, {result['num_test']} test points)"
    )
    print(f"95% prediction interval covers {100 * result['coverage_95']:.1f}% of test targets")
    print(f"wall time {result['seconds']:.1f} s (load, train, score; imports not counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # also `python -m zoo.experiments.main_job`
