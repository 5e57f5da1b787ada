"""When to draw a mean-field weight's terms in one XLA cluster: a train step by layer width.

    python benchmarks/draw_cluster.py           # ~1-2 minutes on 2 CPU cores
    python benchmarks/draw_cluster.py --quick   # smoke run: two widths, 1 round

Outside an XLA-compiled model, `MeanFieldNormal.draw` computes a weight's
softplus, noise, perturbation and KL either as TensorFlow ops one by one or
as one compiled XLA cluster (`tfp_bnn.posteriors.mean_field`), the cluster
for tensors of at least `FUSE_MIN_SIZE` weights. This times one training
step (`train_on_batch`, Keras' default: no XLA on a CPU) of a
k-k-1 `DenseReparameterization` MLP, batch 64, for each width k with three
settings of the threshold: every weight in the cluster (0), none (never),
and the default. The kernels have k * k weights, the biases k.
Interleaved rounds, medians (see `_timing.py`); the warm-up call traces the
step and compiles the clusters.

Read: plain / cluster below 1 means the op-by-op kernels are faster at that
width; the default should be the faster of the two on both sides of it.
"""

import argparse
import sys

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path
import _timing
import keras
import numpy as np
import tensorflow as tf
import tfp_bnn
from tfp_bnn.posteriors import mean_field

WIDTHS = (32, 64, 128, 256, 512, 1024)
QUICK_WIDTHS = (16, 128)
DEFAULT = mean_field.FUSE_MIN_SIZE
# Threshold per variant: every weight in the cluster, none, the shipped default.
SETTINGS = {"cluster": 0, "plain": float("inf"), "default": DEFAULT}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="timed steps per round")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=1,
                        help="TF intra- and inter-op threads (the zoo's default: 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: two widths, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.repeats = 3, 1
    _common.require_positive(parser, args, ("calls", "repeats", "threads"))
    return args


def variant(width, setting, seed):
    """A `_timing.Variant` timing one train step of the k-k-1 model under `setting`."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, width)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    model = keras.Sequential([
        keras.Input((width,)),
        tfp_bnn.layers.DenseReparameterization(width, activation="relu", kl_weight=1e-3,
                                               seed=seed),
        tfp_bnn.layers.DenseReparameterization(1, kl_weight=1e-3, seed=seed + 2)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")

    def step():
        # The threshold is read when the step is traced (the warm-up call).
        mean_field.FUSE_MIN_SIZE = SETTINGS[setting]
        try:
            return model.train_on_batch(x, y)
        finally:
            mean_field.FUSE_MIN_SIZE = DEFAULT

    return _timing.timed(f"k = {width}, {setting}", step)


def main(argv=None):
    args = parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(args.seed)
    widths = QUICK_WIDTHS if args.quick else WIDTHS
    print(f"== Mean-field draw: XLA cluster or op by op, train step of k-k-1 "
          f"DenseReparameterization, default threshold {DEFAULT} weights ==")
    print("\n".join(_timing.machine_info()))
    tables, ratios = [], []
    for width in widths:
        variants = {name: variant(width, name, args.seed) for name in SETTINGS}
        for item in variants.values():
            item.warm_up(1)
        _timing.run_round_robin(list(variants.values()), args.repeats, args.calls,
                                log=lambda m: None)
        tables.append((f"k = {width} (kernel {width * width} weights), median per step",
                       variants, "cluster"))
        ratios.append((f"ratio plain / cluster, k = {width}", variants["plain"],
                       variants["cluster"], None))
        ratios.append((f"ratio default / faster of the two, k = {width}", variants["default"],
                       min(variants["plain"], variants["cluster"],
                           key=lambda v: v.median() if v.ok else float("inf")), None))
    _timing.print_report(tables, ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
