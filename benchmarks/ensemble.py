"""Deep-ensemble training time: one M = 5 ensemble `fit` against 5 sequential member fits.

    python benchmarks/ensemble.py           # ~2-4 minutes on 2 CPU cores
    python benchmarks/ensemble.py --quick   # smoke run, small sizes

Model: the zoo's `deep_ensemble` (Lakshminarayanan et al. 2017, UCI setup): members are
plain MLPs d-50-2 with a heteroscedastic Gaussian output, Adam, batch 32, on random
regression data of UCI size (1,000 rows, 8 features). One timed call builds the model(s) and
trains them for the same number of epochs, tracing included (each sequential member traces
its own step, as 5 separate trainings do). Measured in one run, in interleaved rounds,
medians reported (see `_timing.py`):

- baseline: 5 sequential trainings of one member (`zoo.models.ensemble.plain_mlp`);
- the ensemble with its members' Dense weights stacked (one batched matmul per layer);
- the ensemble running its 5 members one after another in one graph (`vectorize=False`).

Target: ensemble / sequential <= 0.5.
"""

import argparse
import sys

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path
import _timing
import keras
import numpy as np
import tensorflow as tf
from zoo.models import ensemble

# Integer options (--members M, --rows, ...) and their values in a full and a --quick run.
SIZES = {"members": 5, "rows": 1000, "features": 8, "epochs": 20, "repeats": 3}
QUICK = {"members": 2, "rows": 64, "epochs": 1, "repeats": 1}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in SIZES.items():
        parser.add_argument(f"--{name}", type=int, default=default,
                            help=f"default {default} (--quick: {QUICK.get(name, default)})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    _common.require_positive(parser, args, tuple(SIZES))
    return args


def regression_data(args):
    """UCI-sized random regression rows: x ~ N(0, I), y = sin(x_0) + noise."""
    rng = np.random.default_rng(args.seed)
    x = rng.normal(size=(args.rows, args.features)).astype("float32")
    return x, (np.sin(x[:, :1]) + 0.1 * rng.normal(size=(args.rows, 1))).astype("float32")


def main(argv=None):
    args = parse_args(argv)
    tf.get_logger().setLevel("ERROR")
    keras.utils.set_random_seed(args.seed)
    x, y = regression_data(args)
    count = args.members
    print(f"== Deep-ensemble training benchmark: M = {count} MLPs {args.features}-50-2, "
          f"{args.rows} rows, {args.epochs} epochs ==")
    print("\n".join(_timing.machine_info()))
    shape = (args.features,)

    def train(model):
        model.fit(x, y, batch_size=32, epochs=args.epochs, verbose=0, shuffle=True)

    def sequential():
        for m in range(count):
            train(ensemble.plain_mlp(shape, "regression", None, m, None))

    def one_fit(vectorize):
        def run():
            if vectorize:  # the zoo's model, as `zoo.build_model("deep_ensemble")` makes it
                model = ensemble.deep_ensemble(shape, num_train=args.rows, num_members=count)
            else:
                model = ensemble.ensembles.deep_ensemble(
                    [ensemble.plain_mlp(shape, "regression", None, m, None)
                     for m in range(count)], vectorize=False)
                model.compile(optimizer=keras.optimizers.Adam(1e-3),
                              loss=ensemble.ensembles.MemberLoss(ensemble.GaussianNLL()))
            assert model.get_layer("members").vectorized == vectorize
            train(model)
        return run

    variants = {
        "sequential": _timing.timed(f"{count} sequential member fits", sequential),
        "stacked": _timing.timed(f"one fit, M = {count}, stacked weights", one_fit(True)),
        "graph": _timing.timed(f"one fit, M = {count}, members one by one", one_fit(False)),
    }
    for variant in variants.values():
        print(f"  warming up {variant.name} ...", flush=True)
        variant.warm_up(1)
    # Two calls per round: the first of each call is dropped by Variant.run.
    _timing.run_round_robin(list(variants.values()), args.repeats, 2,
                            log=lambda m: print(m, flush=True))
    _timing.print_report(
        [(f"training time, {args.epochs} epochs (build and tracing included); median per "
          "training", variants, "sequential")],
        [("ratio ensemble stacked / sequential", variants["stacked"], variants["sequential"],
          ("<=", 0.5)),
         ("ratio ensemble one by one / sequential", variants["graph"], variants["sequential"],
          ("<=", 0.5))])
    return 0


if __name__ == "__main__":
    sys.exit(main())
