"""Part (a) of moments.py: one moment pass against T Monte Carlo passes, on sunspots.

A Flipout-trained `TokenTransformerRegressor` and a moment-propagation copy
with the same weights predict the 240 sunspots test windows in interleaved
rounds; `part_a` times them and scores their log-likelihoods, `print_a`
prints the table, the ratios and the log-likelihood difference. The protocol
is in the docstring of moments.py.
"""

import math

import numpy as np
import tensorflow as tf

import _timing
import tfp_bnn
from tfp_bnn.predict import RegressionPrediction
from zoo.experiments import transformer_compare
from zoo.models import transformer as transformer_models
from zoo.run import scoring

# The block of both parts: width, attention heads, feed-forward units.
WIDTH, HEADS, FF_DIM = 16, 2, 32
SPEED_TARGET = 30.0
LL_TARGET = 0.05


def ms(variant):
    """A variant's median time in milliseconds."""
    return variant.median() * 1e3


def part_a(args, log):
    """Trains, times and scores part (a); returns what `print_a` and the summary print."""
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
    _, train_seconds = scoring.fit(mc_model, x_train, y_train, args.epochs, batch_size=64,
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
    variants = {key: _timing.timed(label, operation, calls, keep=kept[key])
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
        name: scoring.regression_scores(kept[name][0], shift + scale * y_test, shift, scale)
        for name in ("mc", "loop", "moments")
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
    """Prints part (a); returns (speed-up, loop speed-up, fastest moment, fastest MC variant)."""
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
          f"compiled forward calls [jit off] ({ms(v['moments']):.1f} ms against "
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
    print(f"RMSE / 95% coverage: MC {s['mc']['rmse']:.2f} / {100 * s['mc']['coverage_95']:.1f}%, "
          f"loop {s['loop']['rmse']:.2f} / {100 * s['loop']['coverage_95']:.1f}%, moments "
          f"{s['moments']['rmse']:.2f} / {100 * s['moments']['coverage_95']:.1f}%")
    return speedup, loop_speedup, best_moment, best_mc
