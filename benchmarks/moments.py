"""Moment propagation against Monte Carlo: speed, log-likelihood, full-mode growth.

    python benchmarks/moments.py           # ~4-5 minutes on 2 CPU cores
    python benchmarks/moments.py --quick   # smoke run, tiny sizes

The issue's target: one moment-propagation forward pass (diagonal) against
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
import math
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parents[1]
for path in (ROOT, pathlib.Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import _timing  # noqa: E402
import tfp_bnn  # noqa: E402
from tfp_bnn import moments  # noqa: E402
from tfp_bnn.layers.bayesian_transformer_block import BayesianTransformerBlock  # noqa: E402
from tfp_bnn.predict.regression import RegressionPrediction  # noqa: E402
from zoo.experiments import transformer_compare  # noqa: E402
from zoo.models import transformer as transformer_models  # noqa: E402

WIDTH, HEADS, FF_DIM = 16, 2, 32
SPEED_TARGET = 30.0
LL_TARGET = 0.05


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
    for name in ("epochs", "rounds", "samples", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.train_rows < 0 or args.seed < 0:
        parser.error("--train-rows and --seed must be >= 0")
    return args


def timed(name, operation, calls=1, keep=None):
    """A `_timing.Variant` whose one step is `calls` timed calls of `operation`.

    `keep`, if a list, receives every result (for scoring after the timing).
    """

    def run(steps):
        times = []
        for _ in range(steps * calls):
            start = time.perf_counter()
            result = operation()
            times.append(time.perf_counter() - start)
            if keep is not None:
                keep.append(result)
        return times

    return _timing.Variant(name, run)


def _ms(variant):
    return variant.median() * 1e3


def _slope(xs, ys):
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


# ---------------------------------------------------------------- part (a)

def part_a(args, log):
    data, shift, scale = transformer_compare.sunspots_data()
    window = transformer_compare.WINDOW
    x_train, y_train = data["x_train"], data["y_train"]
    if args.train_rows:
        x_train, y_train = x_train[-args.train_rows:], y_train[-args.train_rows:]
    x_test = np.asarray(data["x_test"], np.float32)
    y_test = np.asarray(data["y_test"], np.float64)
    config = dict(width=WIDTH, num_heads=HEADS, ff_dim=FF_DIM, pooling="last", seed=args.seed)
    log(f"training the Flipout regressor: {len(y_train)} windows, {args.epochs} epochs ...")
    mc_model = transformer_models.build(window, "mc", **config)
    _, train_seconds = transformer_models.train(mc_model, x_train, y_train, args.epochs,
                                                seed=args.seed)
    log(f"  trained in {train_seconds:.1f} s")
    moment_model = transformer_models.build(window, "moments", mode="diagonal", **config)
    moment_model.set_weights(mc_model.get_weights())
    for a, b in zip(mc_model.weights, moment_model.weights):
        if a.shape != b.shape or a.name != b.name:
            raise RuntimeError(f"weight mismatch: {a.path} {a.shape} / {b.path} {b.shape}")

    samples = args.samples
    x_tensor = tf.constant(x_test)
    mc_forward = tf.function(lambda x: mc_model(x, training=False))
    jits = (False,) if args.no_xla else (False, True)
    moment_forward = {jit: tf.function(lambda x: moment_model(x, training=False),
                                       jit_compile=jit) for jit in jits}

    def vectorised(jit):
        return lambda: tfp_bnn.predict.regression(mc_model, x_test, num_samples=samples,
                                                  jit_compile=jit)

    def loop():
        outputs = np.stack([mc_forward(x_tensor).numpy() for _ in range(samples)])
        return RegressionPrediction(outputs[..., 0], np.exp(outputs[..., 1].astype(np.float64)))

    def moment(jit):
        def run():
            outputs = moment_forward[jit](x_tensor).numpy()
            return RegressionPrediction(outputs[None, :, 0],
                                        np.exp(outputs[None, :, 1].astype(np.float64)))
        return run

    specs = {  # key: (label, operation, calls per step)
        "mc": (f"MC vectorised: predict.regression T={samples} [jit off]",
               vectorised(False), 1),
        "mc_xla": (f"MC vectorised: predict.regression T={samples} [XLA]", vectorised(True), 1),
        "loop": (f"MC loop: {samples} x compiled model(x) [jit off]", loop, 1),
        "moments": ("moments diagonal: 1 compiled call [jit off]", moment(False), 10),
        "moments_xla": ("moments diagonal: 1 compiled call [XLA]", moment(True), 10),
    }
    if args.no_xla:
        del specs["mc_xla"], specs["moments_xla"]
    kept = {key: [] for key in specs}
    variants = {key: timed(label, operation, calls, keep=kept[key])
                for key, (label, operation, calls) in specs.items()}
    for variant in variants.values():
        log(f"  warming up {variant.name} ...")
        variant.warm_up(1)
        if not variant.ok:
            raise RuntimeError(f"{variant.name} failed: {variant.error}")
    for values in kept.values():
        values.clear()  # the warm-up's results are not scored (nor timed)
    log(f"timing {len(y_test)} test windows, {args.rounds} interleaved rounds ...")
    _timing.run_round_robin(list(variants.values()), args.rounds, 3, log=log)

    # -- log-likelihoods, per test point, in sunspot numbers
    def per_point(prediction):
        return prediction.rescale(shift=shift, scale=scale).log_likelihood(
            y_test * scale + shift)

    mc_runs = np.stack([per_point(p) for p in kept["mc"] + kept.get("mc_xla", [])])  # [K, N]
    mc_ll = mc_runs.mean(axis=0)
    loop_ll = np.stack([per_point(p) for p in kept["loop"]]).mean(axis=0)
    moment_ll = per_point(kept["moments"][0])
    moment_xla_ll = per_point(kept["moments_xla"][0]) if "moments_xla" in kept else None
    diff = moment_ll - mc_ll
    run_means = mc_runs.mean(axis=1)
    # How much of the predictive variance is weight uncertainty: if it were
    # negligible, any two methods would agree on the LL by construction.
    noise = float(np.exp(mc_model.log_noise.numpy()))
    epistemic = np.mean([p.epistemic_variance.mean() for p in kept["mc"]])
    mc_total = np.mean([p.total_variance.mean() for p in kept["mc"]])
    propagated = float(np.mean(kept["moments"][0].total_variance - noise))
    moment_total = float(np.mean(kept["moments"][0].total_variance))
    scores = {
        "mc": transformer_models.scores(kept["mc"][0], y_test, shift, scale),
        "loop": transformer_models.scores(kept["loop"][0], y_test, shift, scale),
        "moments": transformer_models.scores(kept["moments"][0], y_test, shift, scale),
    }
    return {
        "variants": variants, "train_seconds": train_seconds, "num_train": len(y_train),
        "num_test": len(y_test), "scale": scale,
        "mc_ll": float(mc_ll.mean()), "loop_ll": float(loop_ll.mean()),
        "moment_ll": float(moment_ll.mean()),
        "jit_gap": (None if moment_xla_ll is None
                    else float(np.abs(moment_xla_ll - moment_ll).max())),
        "diff": float(diff.mean()),
        "diff_se": float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else 0.0,
        "mc_runs": len(run_means),
        "mc_run_std": float(run_means.std(ddof=1)) if len(run_means) > 1 else float("nan"),
        "mc_run_pair": (float(run_means[0] - run_means[1]) if len(run_means) > 1
                        else float("nan")),
        "scores": scores,
        "epistemic_share_mc": float(epistemic / mc_total),
        "epistemic_share_moments": propagated / moment_total,
        "propagated_over_epistemic": float(propagated / epistemic),
    }


def print_a(args, a):
    v = a["variants"]
    print()
    moment_keys = [key for key in ("moments", "moments_xla") if key in v]
    mc_keys = [key for key in ("mc", "mc_xla") if key in v]
    best_moment = min((v[key] for key in moment_keys), key=lambda x: x.median())
    best_mc = min((v[key] for key in mc_keys), key=lambda x: x.median())
    print(_timing.format_table(
        f"(a) one prediction of the {a['num_test']} sunspots test windows, median per "
        f"prediction (x base = x the fastest moment variant)", list(v.values()),
        baseline=best_moment))
    print()
    short = {"mc": "MC vectorised [jit off]", "mc_xla": "MC vectorised [XLA]",
             "loop": "MC loop [jit off]", "moments": "moments [jit off]",
             "moments_xla": "moments [XLA]"}
    for mc_key in mc_keys + ["loop"]:
        for m_key in moment_keys:
            print(_timing.ratio_line(f"ratio {short[mc_key]} / {short[m_key]}",
                                     v[mc_key], v[m_key]))
    speedup = best_mc.median() / best_moment.median()
    loop_speedup = v["loop"].median() / best_moment.median()
    print()
    print(f"headline pair: [{best_moment.name}] against the faster vectorised MC "
          f"[{best_mc.name}]")
    print(f"moments (diagonal) vs T={args.samples} MC: {speedup:.1f}x faster "
          f"(target >= {SPEED_TARGET:.0f}x: {'PASS' if speedup >= SPEED_TARGET else 'MISS'})")
    print(f"moments (diagonal) vs loop of {args.samples} forward calls [reference, not the "
          f"target]: {loop_speedup:.1f}x faster")
    per_call = v["loop"].median() / args.samples
    print(f"one moment pass [jit off] costs {v['moments'].median() / per_call:.2f} single "
          f"compiled forward calls [jit off] ({_ms(v['moments']):.1f} ms against "
          f"{per_call * 1e3:.1f} ms); the vectorised MC costs "
          f"{best_mc.median() / args.samples * 1e3:.1f} ms per weight sample")
    print()
    print(f"test log-likelihood, nats per point in sunspot numbers (N = {a['num_test']}):")
    print(f"  MC vectorised, T={args.samples}: {a['mc_ll']:.4f}  (mean over {a['mc_runs']} "
          f"independent runs; run-to-run std {a['mc_run_std']:.4f}, first two runs differ by "
          f"{a['mc_run_pair']:+.4f})")
    print(f"  MC loop, T={args.samples} (Flipout per call): {a['loop_ll']:.4f}")
    gap = ("" if a["jit_gap"] is None
           else f"  (jit off vs XLA: max per-point gap {a['jit_gap']:.1e})")
    print(f"  moments (diagonal), one pass:   {a['moment_ll']:.4f}{gap}")
    ok = abs(a["diff"]) <= LL_TARGET
    print(f"LL difference moments - MC: {a['diff']:+.4f} nats/point (SE over test points "
          f"{a['diff_se']:.4f}; target |diff| <= {LL_TARGET}: {'PASS' if ok else 'MISS'})")
    print(f"weight uncertainty in the predictive variance (mean over test points): MC "
          f"epistemic {100 * a['epistemic_share_mc']:.1f}% of the total, moments propagated "
          f"{100 * a['epistemic_share_moments']:.1f}%; propagated / MC epistemic = "
          f"{a['propagated_over_epistemic']:.2f}")
    s = a["scores"]
    print(f"RMSE / 95% coverage: MC {s['mc']['rmse']:.2f} / {100 * s['mc']['coverage']:.1f}%, "
          f"loop {s['loop']['rmse']:.2f} / {100 * s['loop']['coverage']:.1f}%, moments "
          f"{s['moments']['rmse']:.2f} / {100 * s['moments']['coverage']:.1f}%")
    return speedup, loop_speedup, best_moment, best_mc


# ---------------------------------------------------------------- part (b)

def _peak_bytes(function, x):
    """TF CPU allocator peak during one call, minus what was allocated before."""
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        function(x).numpy()
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    except (ValueError, RuntimeError, tf.errors.OpError):
        return None
    return max(peak - before, 0) if peak > 0 else None


def _block_pass(params, key_dim, mode, jit):
    """The compiled block pass x -> output mean, in `mode`."""

    def forward(x):
        return moments.transformer_block(x, params, HEADS, key_dim, mode=mode,
                                         max_bytes=2**33).mean

    return tf.function(forward, jit_compile=jit)


def part_b(args, log):
    rows = {}
    variants = []
    for seq_len in args.lengths:
        block = BayesianTransformerBlock(num_heads=HEADS, ff_dim=FF_DIM, seed=args.seed)
        shape = (args.batch, seq_len, WIDTH)
        block.build(shape)
        params = block.moment_parameters()
        x = tf.random.stateless_normal(shape, seed=[args.seed, seq_len])
        key_dim = block.attention.key_dim
        row = {"x": x, "bytes": moments.full_covariance_bytes(
            args.batch, seq_len, WIDTH, HEADS, key_dim, key_dim, FF_DIM)}
        for mode in ("full", "diagonal"):
            function = _block_pass(params, key_dim, mode, jit=not args.no_xla)
            variant = timed(f"J={seq_len} {mode} [{_jit_label(args)}]",
                            lambda f=function, x=x: f(x).numpy(),
                            calls=1 if mode == "full" else 10)
            row[mode] = (function, variant)
            variants.append(variant)
        rows[seq_len] = row
    for variant in variants:
        log(f"  warming up {variant.name} ...")
        variant.warm_up(1)
        if not variant.ok:
            raise RuntimeError(f"{variant.name} failed: {variant.error}")
    log(f"timing full and diagonal modes, {args.rounds} interleaved rounds ...")
    _timing.run_round_robin(variants, args.rounds, 3, log=log)
    for row in rows.values():
        for mode in ("full", "diagonal"):
            function, variant = row[mode]
            row[f"{mode}_peak"] = _peak_bytes(function, row["x"]) if variant.ok else None
    return rows, variants


def _jit_label(args):
    return "jit off" if args.no_xla else "XLA"


def _mb(value):
    if value is None:
        return "n/a"
    return "<0.01" if value < 0.005 * 2**20 else f"{value / 2**20:.2f}"


def print_b(args, rows, variants):
    print()
    print(_timing.format_table(
        f"(b) one block pass, B = {args.batch}, width {WIDTH}, {HEADS} heads, ff {FF_DIM}, "
        f"{_jit_label(args)}; median per pass", variants))
    print()
    lines = ["| J | full ms | diagonal ms | full/diagonal | largest covariance MB (analytic) "
             "| full peak MB (TF allocator) | diagonal peak MB |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    lengths, full_ms, peaks = [], [], []
    for seq_len, row in rows.items():
        full, diag = row["full"][1], row["diagonal"][1]
        if not (full.ok and diag.ok):
            lines.append(f"| {seq_len} | {full.error or ''} {diag.error or ''} |")
            continue
        lengths.append(seq_len)
        full_ms.append(_ms(full))
        peaks.append(row["full_peak"])
        lines.append(f"| {seq_len} | {_ms(full):.2f} | {_ms(diag):.2f} | "
                     f"{full.median() / diag.median():.1f} | {row['bytes'] / 2**20:.2f} | "
                     f"{_mb(row['full_peak'])} | {_mb(row['diagonal_peak'])} |")
    table = "\n".join(lines)
    print(table)
    growth = []
    if len(lengths) >= 2:
        growth.append(f"full-mode time grows as J^{_slope(lengths, full_ms):.2f} "
                      f"(log-log slope over J = {', '.join(map(str, lengths))}); between the "
                      f"last two J: J^{_slope(lengths[-2:], full_ms[-2:]):.2f}")
        measured = [(j, p) for j, p in zip(lengths, peaks) if p]
        if any(p is None for p in peaks):
            growth.append("peak memory not measurable here (TF allocator stats "
                          "unavailable): analytic bytes only")
        elif len(measured) >= 2:
            js, ps = zip(*measured)
            growth.append(f"full-mode peak memory grows as J^{_slope(js, ps):.2f} "
                          f"(over J = {', '.join(map(str, js))}; last two J: "
                          f"J^{_slope(js[-2:], ps[-2:]):.2f}); the largest covariance, "
                          "B*H*J^4 floats, grows as J^4 once it dominates")
        else:
            growth.append("full-mode peak memory too small to measure at these J")
    for line in growth:
        print(line)
    return table, growth


# ---------------------------------------------------------------- main

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
        print(f"| {variant.name} | {_ms(variant):.1f} | {rel:.1f} | {ll[key]:.3f} |")
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
          f"{_jit_label(args)}:")
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
