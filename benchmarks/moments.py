"""Moment propagation against Monte Carlo: speed, log-likelihood, full-mode growth.

    python benchmarks/moments.py           # ~4-5 minutes on 2 CPU cores
    python benchmarks/moments.py --quick   # smoke run, tiny sizes

The target: one moment-propagation forward pass (diagonal) against
T = 100 Monte Carlo forward passes of the same Bayesian block and batch,
>= 30x faster, with a predictive log-likelihood within 0.05 nats per point
of the Monte Carlo one; and how time and memory of the full mode grow with J.

(a) Speed and log-likelihood on the real task. A
    `zoo.models.transformer.TokenTransformerRegressor` (width 16, 2 heads,
    ff 32, last-token pooling) is trained with path="mc" (Flipout) on the
    packaged sunspots (`zoo.experiments.transformer_compare.sunspots_data()`: window 24,
    test = the last 240 months) for --epochs epochs. A second regressor with
    path="moments" (diagonal) gets the same weights (`set_weights`). On the
    240 test windows, in interleaved rounds (medians, see `_timing.py`):
    - MC, vectorised: `tfp_bnn.predict.regression(model, x, T)` (the T
      weight samples run in a few traced calls), jit off (the library
      default) and with XLA;
    - MC, loop (reference only): T calls of the compiled model (`tf.function`,
      training=False; every call draws new Flipout weights), jit off;
    - moments: one compiled call of the moment model, which returns
      [mean, log(propagated variance + noise)], jit off and with XLA.
    Every variant's time covers the forward pass(es), the copy to numpy and
    the `RegressionPrediction` built from it. The headline ratio is the
    fastest moment variant against the fastest *vectorised* MC variant.
    Log-likelihoods are per test point in the data's units (sunspot
    numbers: LL_data = LL_standardised - log(std)): MC = log-mean-exp of the
    T Gaussians, averaged over the independent T-sample runs the timing made
    (their spread is the MC estimate's own sampling noise); moments = one
    Gaussian with the propagated variance plus the noise.

(b) Full mode against diagonal mode as J grows: an untrained
    `BayesianTransformerBlock` (width 16, 2 heads, ff 32; its initial
    posterior standard deviations) on a random batch [B, J, 16];
    `tfp_bnn.moments.transformer_block` in each mode, XLA-compiled, timed in
    interleaved rounds. Memory: the analytic largest covariance
    (`tfp_bnn.moments.full_covariance_bytes`) and the TensorFlow CPU
    allocator's peak during one call (`tf.config.experimental
    .get_memory_info`, after `reset_memory_stats`), minus what was
    allocated before the call.
"""

import argparse
import sys
import time

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path

import keras
import tensorflow as tf

import _timing
from _moments_growth import jit_label
from _moments_growth import part_b
from _moments_growth import print_b
from _moments_speed import FF_DIM
from _moments_speed import HEADS
from _moments_speed import LL_TARGET
from _moments_speed import SPEED_TARGET
from _moments_speed import WIDTH
from _moments_speed import ms
from _moments_speed import part_a
from _moments_speed import print_a


def _lengths(text):
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}")
    if len(values) < 1 or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"lengths must be >= 1, got {text!r}")
    return values


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="Flipout training epochs")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--samples", type=int, default=100, help="T, Monte Carlo samples")
    parser.add_argument("--lengths", type=_lengths, default=(4, 8, 16, 32),
                        help="sequence lengths J of part (b), comma-separated")
    parser.add_argument("--batch", type=int, default=8, help="batch B of part (b)")
    parser.add_argument("--train-rows", type=int, default=0,
                        help="training windows used (0 = all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-xla", action="store_true",
                        help="skip the XLA variants of (a) and run (b) with jit off")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 epoch on 128 windows, T = 10, J in (4, 8), "
                             "1 round, no XLA")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.rounds, args.samples = 1, 1, 10
        args.lengths, args.batch, args.train_rows = (4, 8), 2, 128
        args.no_xla = True
    _common.require_positive(parser, args, ("epochs", "rounds", "samples", "batch"))
    if args.train_rows < 0 or args.seed < 0:
        parser.error("--train-rows and --seed must be >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    tf.get_logger().setLevel("ERROR")
    start = time.perf_counter()

    def log(message):
        print(message, flush=True)

    print(f"== Moment propagation vs Monte Carlo, one Bayesian transformer block "
          f"(width {WIDTH}, {HEADS} heads, ff {FF_DIM}), T = {args.samples} ==")
    for line in _timing.machine_info():
        print(line)
    a = part_a(args, log)
    speedup, loop_speedup, best_moment, best_mc = print_a(args, a)
    print()
    rows, variants = part_b(args, log)
    table_b, growth = print_b(args, rows, variants)
    seconds = time.perf_counter() - start

    v = a["variants"]
    print()
    print("---- summary for BENCHMARKS.md ----")
    print("### Moment propagation vs Monte Carlo (`benchmarks/moments.py`)")
    print()
    print(f"(a) Sunspots, window 24, test = last {a['num_test']} months. "
          f"`TokenTransformerRegressor` (width {WIDTH}, {HEADS} heads, ff {FF_DIM}) trained "
          f"{args.epochs} epoch(s) with Flipout on {a['num_train']} windows; the moment model "
          f"has the same weights. One prediction of the {a['num_test']} test windows, "
          f"median of {args.rounds} interleaved rounds; LL in nats per point, sunspot units.")
    print()
    print("| prediction | median ms | x moments (fastest) | test LL |")
    print("|---|---:|---:|---:|")
    ll = {"mc": a["mc_ll"], "mc_xla": a["mc_ll"], "loop": a["loop_ll"],  # MC: all runs pooled
          "moments": a["moment_ll"], "moments_xla": a["moment_ll"]}
    for key, variant in v.items():
        rel = variant.median() / best_moment.median()
        print(f"| {variant.name} | {ms(variant):.1f} | {rel:.1f} | {ll[key]:.3f} |")
    print()
    print(f"- moments (diagonal) vs T={args.samples} vectorised MC: **{speedup:.1f}x** faster "
          f"(target >= {SPEED_TARGET:.0f}x: {'PASS' if speedup >= SPEED_TARGET else 'MISS'}); "
          f"vs a loop of {args.samples} compiled calls: {loop_speedup:.1f}x.")
    print(f"- LL moments - MC: **{a['diff']:+.3f}** nats/point, SE {a['diff_se']:.3f} over test "
          f"points (target |diff| <= {LL_TARGET}: "
          f"{'PASS' if abs(a['diff']) <= LL_TARGET else 'MISS'}); MC T={args.samples} "
          f"run-to-run std {a['mc_run_std']:.3f} ({a['mc_runs']} runs).")
    print(f"- Weight uncertainty is {100 * a['epistemic_share_mc']:.1f}% of the MC predictive "
          f"variance ({100 * a['epistemic_share_moments']:.1f}% for moments; propagated / MC "
          f"epistemic variance = {a['propagated_over_epistemic']:.2f}).")
    print()
    print(f"(b) Full vs diagonal mode, untrained block, B = {args.batch}, "
          f"{jit_label(args)}:")
    print()
    print(table_b)
    print()
    for line in growth:
        print(f"- {line}.")
    print("---- end of summary ----")
    print(f"wall time {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
