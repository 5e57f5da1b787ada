"""TFP's probabilistic-layer programs on tf_keras + tfp.layers, and their tfp_bnn ports.

    python benchmarks/tfp_ports.py                 # both sides, 3 seeds (~10 minutes, 2 cores)
    python benchmarks/tfp_ports.py --side tfp      # only the TFP originals
    python benchmarks/tfp_ports.py --quick         # smoke run: 1 seed, a few steps

Two public TFP programs, re-implemented here from their published settings
(no code copied), then ported to tfp_bnn on Keras 3, both sides trained in
one process on the same data with the same epochs and batches:

1. `tensorflow_probability/examples/bayesian_neural_network.py`: LeNet-5 with
   `Convolution2DFlipout` / `DenseFlipout`, KL scaled by 1/N, Adam(1e-3),
   batch 128, held-out log-likelihood from 50 Monte Carlo passes. Instead of
   MNIST: scikit-learn's 8x8 digits, a fixed stratified 80/20 split, and
   `--lenet-epochs` epochs (the original runs 6000 steps on MNIST). With
   padding "SAME" everywhere, as in the original, LeNet takes 8x8 inputs
   (8 -> 4 -> 2 pixels); nothing is resized.
2. `tensorflow_probability/examples/jupyter_notebooks/Probabilistic_Layers_Regression.ipynb`:
   its synthetic data (w0 = 0.125, b0 = 5, x in [-20, 60], 150 points, noise
   std 3 (0.25 + g^2), NumPy seed 43) and its five cases, Adam(0.01),
   1000 epochs at Keras' default batch 32 (case 5: float64, 40 inducing
   points, batch 32). The notebook has no test targets; they are drawn here
   from the same generator at its 150 test inputs (NumPy seed 44).

Differences kept on purpose, the same for both sides: targets are fed as
(N, 1) (the notebook passes (N,) and relies on tf_keras expanding them);
training reads a shuffled `tf.data` pipeline with the epochs unrolled
(`repeat(epochs)`, one `fit` epoch), which gives the same batches as
`fit(epochs=E, batch_size=32)` without the per-epoch overhead.

Scores, mean +- standard error over the seeds (model initialisation and
batch order; the data are fixed): test NLL (nats per test point, of the
predictive distribution: for weight-sampling models the mixture over
`--mc-samples` passes), test RMSE of the predictive mean (regression) or
accuracy (digits), and the training time. Case 5 is ported to
`tfp_bnn.layers.VariationalGaussianProcess` with the notebook's RBFKernelFn as
`tfp_bnn.kernels.ExponentiatedQuadraticProvider`; both sides are scored on
the per-point predictive marginals (the GP has no weights to sample).
"""

import argparse
import math
import os
import platform
import time
import warnings

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path

import numpy as np
import tensorflow as tf

from _tfp_bnn_ports import ours_lenet
from _tfp_bnn_ports import ours_regression
from _tfp_bnn_ports import ours_vgp
from _tfp_originals import tfp_lenet
from _tfp_originals import tfp_modules
from _tfp_originals import tfp_regression
from _tfp_originals import tfp_vgp
from _tfp_programs import LENET_MC
from _tfp_programs import REG_EPOCHS
from _tfp_programs import NotAvailable
from _tfp_programs import digits_data
from _tfp_programs import regression_data

CASES = ("lenet", "case1", "case2", "case3", "case4", "case5")
CASE_TITLES = {
    "lenet": "LeNet-5 Flipout, 8x8 digits",
    "case1": "regression 1: no uncertainty",
    "case2": "regression 2: aleatoric",
    "case3": "regression 3: epistemic",
    "case4": "regression 4: aleatoric + epistemic",
    "case5": "regression 5: variational GP",
}


def run_case(side, case, args, regression, digits, seed):
    if case == "lenet":
        fn = tfp_lenet if side == "tfp" else ours_lenet
        return fn(digits, args.lenet_epochs, seed, min(args.mc_samples, LENET_MC))
    if case == "case5":
        return (tfp_vgp if side == "tfp" else ours_vgp)(regression, args.epochs, seed)
    fn = tfp_regression if side == "tfp" else ours_regression
    return fn(case, regression, args.epochs, seed, args.mc_samples)


def _summary(values):
    values = np.asarray(values, np.float64)
    if len(values) < 2:
        return float(values.mean()), float("nan")
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values)))


def _cell(values, digits=3):
    mean, se = _summary(values)
    return f"{mean:.{digits}f}" if math.isnan(se) else f"{mean:.{digits}f} +- {se:.{digits}f}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", choices=("both", "tfp", "ours"), default="both")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=REG_EPOCHS,
                        help="regression epochs (the notebook's 1000)")
    parser.add_argument("--lenet-epochs", type=int, default=40,
                        help="LeNet epochs on the 8x8 digits")
    parser.add_argument("--mc-samples", type=int, default=100,
                        help="passes of weight-sampling models (LeNet: the program's 50)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 seed, 2 regression / 1 LeNet epoch, 5 passes")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs, args.lenet_epochs, args.mc_samples = 1, 2, 1, 5
    _common.require_positive(parser, args, ("seeds", "epochs", "lenet_epochs", "mc_samples"))
    return args


def main(argv=None):
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    import keras
    import tensorflow_probability as tfp

    sides = ("tfp", "ours") if args.side == "both" else (args.side,)
    print(f"python {platform.python_version()}, tensorflow {tf.__version__}, "
          f"tensorflow_probability {tfp.__version__}, keras {keras.__version__}")
    if "tfp" in sides:
        tf_keras, _ = tfp_modules()
        print(f"tf_keras {tf_keras.__version__} (TFP side only)")
    print(f"cpu cores: {os.cpu_count()}; seeds: {args.seeds}; regression epochs: "
          f"{args.epochs} (notebook: {REG_EPOCHS}); LeNet epochs on 8x8 digits: "
          f"{args.lenet_epochs} (program: 6000 steps on MNIST); MC passes: "
          f"LeNet {min(args.mc_samples, LENET_MC)}, regression {args.mc_samples}")
    if args.epochs != REG_EPOCHS:
        print(f"NOTE: regression epochs reduced from the notebook's {REG_EPOCHS} "
              f"to {args.epochs}.")

    regression = regression_data()
    digits = digits_data() if "lenet" in args.cases else None
    rows = []
    total = time.perf_counter()
    for case in args.cases:
        for side in sides:
            scores, note = [], ""
            for seed in range(args.seeds):
                try:
                    scores.append(run_case(side, case, args, regression, digits, seed))
                except NotAvailable as error:
                    note = str(error)
                    break
            label = "TFP original" if side == "tfp" else "tfp_bnn port"
            rows.append((case, label, scores, note))
            if note:
                print(f"  {case:6s} {label}: {note}", flush=True)
            else:
                per_seed = ", ".join(f"{s[0]:.3f}" for s in scores)
                print(f"  {case:6s} {label}: test NLL per seed {per_seed}; "
                      f"{sum(s[2] for s in scores):.1f} s training in all", flush=True)

    print()
    header = f"{'case':40s} {'side':13s} {'test NLL (nats)':>18s} {'RMSE / accuracy':>18s} " \
             f"{'train s':>14s}"
    print(header)
    print("-" * len(header))
    for case, label, scores, note in rows:
        title = CASE_TITLES[case]
        if note:
            print(f"{title:40s} {label:13s} {'n/a: ' + note}")
            continue
        nll, metric, seconds = zip(*scores)
        metric_name = "acc" if case == "lenet" else "rmse"
        print(f"{title:40s} {label:13s} {_cell(nll):>18s} "
              f"{metric_name + ' ' + _cell(metric):>18s} {_cell(seconds, 1):>14s}")
    print(f"\nwall time: {time.perf_counter() - total:.0f} s")


if __name__ == "__main__":
    main()
