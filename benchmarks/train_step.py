"""Time one training step of a 784-400-400-10 MLP for each dense layer.

    python benchmarks/train_step.py            # ~2-4 minutes on 2 CPU cores
    python benchmarks/train_step.py --quick    # 2 steps per variant, a smoke run (below)
    python benchmarks/train_step.py --backend jax   # the same ratio on Keras' JAX backend
    python benchmarks/train_step.py --paired-runs 3 # both backends, alternated (below)

Variants: `keras.layers.Dense`; tfp_bnn's `DenseFlipout`,
`DenseReparameterization` and `DenseLocalReparameterization` (Keras 3); and
`tfp.layers.DenseFlipout` in a `tf_keras.Sequential` with the usual TFP
pattern (KL scaled by 1/N in a named `kernel_divergence_fn`). All of them:
relu hidden layers, logits out, sparse categorical cross-entropy, Adam,
batch 128, KL weight 1/N with N = 60000 (MNIST-sized), synthetic MNIST-shaped
data.

What is timed is each framework's own `fit` path: the compiled train function,
fed from the same in-memory `tf.data` pipeline. Every model is warmed up
first (tracing, XLA compilation), then all variants run `--steps` steps per
`fit` call in `--repeats` interleaved rounds (order rotated each round), and
the median step time is reported (see `_timing.py`). Two tables: each
framework's default on CPU (Keras 3 "auto" resolves to no XLA on a CPU-only
machine; tf_keras defaults to no XLA), and `jit_compile=True` for every
model, so each ratio compares like with like.

Targets: tfp_bnn DenseFlipout / keras Dense <= 2.2, and
tfp.layers.DenseFlipout / tfp_bnn DenseFlipout >= 1.5.

--paired-runs N compares the backends: N pairs of runs, one on each
backend in a subprocess (TensorFlow in its CPU default, no XLA; JAX compiled),
the order alternating from pair to pair, and prints JAX's Flipout / Dense
ratio over TensorFlow's for each pair and their median (target <= 1.1). Two
backends cannot share a process, so this is the nearest to side by side:
each pair runs back to back, and the spread over pairs shows how much the
load of the machine moved the figure.

--quick, a smoke run: 2 steps per variant, the variants of every ratio, and
DenseReparameterization and DenseLocalReparameterization in one table each
(`QUICK_TABLES`), so that every layer trains without and with XLA at least
once and no layer is compiled for XLA twice.
"""

import argparse
import sys
import warnings

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path

import keras
import numpy as np
import tensorflow as tf

import _jax_reference
import _timing
import tfp_bnn

OURS = {
    "DenseFlipout": tfp_bnn.layers.DenseFlipout,
    "DenseReparameterization": tfp_bnn.layers.DenseReparameterization,
    "DenseLocalReparameterization": tfp_bnn.layers.DenseLocalReparameterization,
}
# The tables each of our layers runs in with --quick: DenseFlipout in both (the ratios).
QUICK_TABLES = {"DenseFlipout": ("jit off", "XLA"), "DenseReparameterization": ("jit off",),
                "DenseLocalReparameterization": ("XLA",)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per fit call")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--warmup-steps", type=int, default=5, help="steps of the warm-up fit")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-examples", type=int, default=60000,
                        help="N of the KL weight 1/N")
    parser.add_argument("--rows", type=int, default=4096,
                        help="synthetic rows held in memory (repeated)")
    parser.add_argument("--no-jit", action="store_true", help="skip the jit_compile=True table")
    parser.add_argument("--no-tfp-jit", action="store_true",
                        help="skip tfp.layers.DenseFlipout with jit_compile=True")
    parser.add_argument("--threads", type=int, default=0,
                        help="TF intra-op threads (0: TF default)")
    parser.add_argument("--seed", type=int, default=0)
    _common.add_backend_flag(parser)
    parser.add_argument("--paired-runs", type=int, default=0,
                        help="compare the backends: this many pairs of runs, one on each "
                             "backend, alternating (see above)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 2 steps per variant, 1 round, each of "
                             "DenseReparameterization and DenseLocalReparameterization in "
                             "one table")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.warmup_steps = 2, 1, 1
    _common.require_positive(parser, args, ("steps", "repeats", "warmup_steps", "batch_size",
                                            "num_examples", "rows"))
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of each fit call is not timed)")
    if args.paired_runs < 0:
        parser.error(f"--paired-runs must be >= 0, got {args.paired_runs}")
    if args.paired_runs and args.backend:
        parser.error("--paired-runs runs both backends; leave out --backend")
    return args


def synthetic_dataset(rows, batch_size, seed):
    """MNIST-shaped random data: pixels in [0, 1), 10 classes, repeated forever."""
    rng = np.random.default_rng(seed)
    x = rng.random((rows, _common.INPUT_DIM), dtype=np.float32)
    y = rng.integers(0, _common.CLASSES, size=(rows,)).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    return dataset.batch(batch_size, drop_remainder=True).prefetch(2)


def _timed_variant(name, model, dataset, callback_base):
    """A `Variant` whose steps run through `model.fit` with a per-step timer.

    `callback_base` is the framework's own Callback class (Keras 3 or tf_keras).
    """

    def fit_steps(steps):
        timer = _timing.step_timer(callback_base)
        model.fit(dataset, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
                  callbacks=[timer])
        return timer.times

    return _timing.Variant(name, fit_steps)


def keras_variant(name, layer_fn, dataset, jit_compile):
    """A Keras 3 MLP whose three layers come from `layer_fn(units, activation)`."""
    model = _common.mlp(layer_fn)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    if bool(model.jit_compile) != bool(jit_compile):
        name += " (XLA refused)"

    return _timed_variant(name, model, dataset, keras.callbacks.Callback)


def tfp_variant(name, dataset, num_examples, jit_compile):
    """`tfp.layers.DenseFlipout` in tf_keras, KL / N through a named divergence fn."""
    import tensorflow_probability as tfp
    import tf_keras

    tfd = tfp.distributions

    def scaled_kl(q, p, _):
        return tfd.kl_divergence(q, p) / num_examples

    model = tf_keras.Sequential(
        [tf_keras.Input((_common.INPUT_DIM,))]
        + [tfp.layers.DenseFlipout(units, activation="relu", kernel_divergence_fn=scaled_kl)
           for units in _common.HIDDEN]
        + [tfp.layers.DenseFlipout(_common.CLASSES, kernel_divergence_fn=scaled_kl)]
    )
    model.compile(
        optimizer=tf_keras.optimizers.Adam(1e-3),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )

    return _timed_variant(name, model, dataset, tf_keras.callbacks.Callback)


def build_table(tag, dataset, args, jit_compile, tfp_jit):
    """The five variants of one table, keyed by short names."""
    seeds = iter(range(args.seed * 100 + 1, args.seed * 100 + 100, 3))

    def ours(layer_cls):
        def layer_fn(units, activation):
            return layer_cls(units, activation=activation,
                             kl_weight=1.0 / args.num_examples, seed=next(seeds))
        return layer_fn

    variants = {"dense": keras_variant(f"keras.layers.Dense [{tag}]",
                                       keras.layers.Dense, dataset, jit_compile)}
    for short, layer_cls in OURS.items():
        if args.quick and tag not in QUICK_TABLES[short]:
            continue
        variants[short] = keras_variant(f"tfp_bnn {short} [{tag}]", ours(layer_cls),
                                        dataset, jit_compile)
    if tfp_jit is not None:
        tfp_tag = "XLA" if tfp_jit else "jit off"
        variants["tfp"] = tfp_variant(f"tfp.layers.DenseFlipout, tf_keras [{tfp_tag}]",
                                      dataset, args.num_examples, tfp_jit)
    return variants


def main(argv=None):
    args = parse_args(argv)
    if args.paired_runs:
        return compare_backends(args)
    if args.backend and args.backend != keras.backend.backend():
        return _common.rerun_with_backend(__file__, argv, args.backend)
    if _common.is_jax():
        return main_jax(args)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(args.seed)
    # Every variant has its own train function, which TF reports as retracing.
    tf.get_logger().setLevel("ERROR")
    # TFP's own layers trip tf_keras deprecation notices that say nothing about speed.
    warnings.filterwarnings("ignore", message=".*add_variable. is deprecated")
    warnings.filterwarnings("ignore", message="The initializer RandomNormal is unseeded")

    print("== train step benchmark: 784-400-400-10 MLP, Adam, batch "
          f"{args.batch_size}, KL weight 1/{args.num_examples} ==")
    for line in _timing.machine_info():
        print(line)
    print(f"timing: {args.warmup_steps} warm-up steps, then {args.repeats} interleaved "
          f"rounds x {args.steps} steps per variant (first step of each fit call not timed)")
    sys.stdout.flush()

    dataset = synthetic_dataset(args.rows, args.batch_size, args.seed)
    tables = [("jit off", build_table("jit off", dataset, args, False, False))]
    if not args.no_jit:
        tables.append(("XLA", build_table("XLA", dataset, args, True,
                                          None if args.no_tfp_jit else True)))
    variants = [v for _, table in tables for v in table.values()]

    for variant in variants:
        print(f"  warming up {variant.name} ...", flush=True)
        variant.warm_up(args.warmup_steps)
    _timing.run_round_robin(variants, args.repeats, args.steps,
                            log=lambda msg: print(msg, flush=True))

    default = tables[0][1]
    report = [("Table 1: each framework's CPU default (no XLA); median per-step time",
               default, "dense")]
    ratios = [("ratio ours Flipout / keras Dense [jit off]",
               default["DenseFlipout"], default["dense"], ("<=", 2.2)),
              ("ratio TFP Flipout / ours Flipout [jit off]",
               default["tfp"], default["DenseFlipout"], (">=", 1.5))]
    if len(tables) > 1:
        xla = tables[1][1]
        report.append(("Table 2: jit_compile=True (XLA); median per-step time", xla, "dense"))
        ratios.append(("ratio ours Flipout / keras Dense [XLA]",
                       xla["DenseFlipout"], xla["dense"], ("<=", 2.2)))
        if "tfp" in xla:
            ratios.append(("ratio TFP Flipout / ours Flipout [XLA]",
                           xla["tfp"], xla["DenseFlipout"], (">=", 1.5)))
        ratios.append(("ratio TFP Flipout [jit off, its default] / ours Flipout [XLA]",
                       default["tfp"], xla["DenseFlipout"], None))
    _timing.print_report(report, ratios)
    print("(n = timed steps; IQR = 25th-75th percentile; 'x base' = median / keras Dense of "
          "the same table)")
    return 0


def main_jax(args):
    """The same models and ratio on Keras' JAX backend, where only the compiled step applies.

    What exists only on TensorFlow is skipped with a printed line: tf_keras'
    `tfp.layers.DenseFlipout` (the TFP comparison) and the jit-off table (on
    JAX, `jit_compile=False` runs the step eagerly op by op, not a
    framework's default path). The data come from the same `tf.data`
    pipeline, which Keras' JAX trainer reads as NumPy batches.

    A second table times the Dense and Flipout steps written in plain JAX
    (`_jax_reference`), interleaved with the Keras models: its Flipout /
    Dense ratio without random numbers is what XLA on this machine allows
    any Flipout step, whatever the library.
    """
    keras.utils.set_random_seed(args.seed)
    print("== train step benchmark: 784-400-400-10 MLP, Adam, batch "
          f"{args.batch_size}, KL weight 1/{args.num_examples}, Keras on JAX ==")
    for line in _timing.machine_info():
        print(line)
    print("skipped on JAX: tfp.layers.DenseFlipout (tf_keras, TensorFlow only); the jit-off "
          "table (JAX runs an uncompiled step eagerly)"
          + ("; --threads (a TensorFlow setting)" if args.threads else ""))
    print(f"timing: {args.warmup_steps} warm-up steps, then {args.repeats} interleaved "
          f"rounds x {args.steps} steps per variant (first step of each fit call not timed)")
    sys.stdout.flush()
    dataset = synthetic_dataset(args.rows, args.batch_size, args.seed)
    table = build_table("XLA", dataset, args, True, None)
    reference = {
        name: _timing.timed(label, _jax_reference.step(flipout, random, args.batch_size,
                                                       args.seed))
        for name, label, flipout, random in (
            ("dense", "hand-written Dense", False, "none"),
            ("xla", "hand-written Flipout, XLA's generator", True, "xla"),
            ("jax", "hand-written Flipout, jax.random", True, "jax"),
            ("none", "hand-written Flipout, no random numbers", True, "none"))
        # --quick: the floor's pair only, which compiles in a few seconds.
        if not args.quick or name in ("dense", "none")}
    for variant in list(table.values()) + list(reference.values()):
        print(f"  warming up {variant.name} ...", flush=True)
        variant.warm_up(args.warmup_steps)
    _timing.run_round_robin(list(table.values()) + list(reference.values()), args.repeats,
                            args.steps, log=lambda msg: print(msg, flush=True))
    _timing.print_report(
        [("JAX backend, jit_compile=True (jax.jit, XLA); median per-step time", table,
          "dense"),
         ("The same steps written in plain JAX (no Keras, no tfp_bnn; "
          "benchmarks/_jax_reference.py)", reference, "dense")],
        [("ratio ours Flipout / keras Dense [XLA]", table["DenseFlipout"], table["dense"],
          ("<=", 2.2)),
         ("ratio hand-written Flipout without random numbers / Dense [plain JAX: the floor]",
          reference["none"], reference["dense"], None)]
        + ([("ratio hand-written Flipout / Dense [plain JAX]", reference["xla"],
             reference["dense"], None)] if "xla" in reference else []))
    print("(n = timed steps; IQR = 25th-75th percentile; 'x base' = median / keras Dense of "
          "the same table)")
    return 0


# The Flipout / Dense line each backend's run prints (its one table on JAX, the jit-off one on TF).
BACKEND_RATIO = {
    "tensorflow": "ratio ours Flipout / keras Dense [jit off]: ",
    "jax": "ratio ours Flipout / keras Dense [XLA]: ",
}


def compare_backends(args):
    """`--paired-runs`: JAX's Flipout / Dense ratio over TensorFlow's, pair by pair."""
    sub_argv = ["--no-jit", "--steps", str(args.steps), "--repeats", str(args.repeats),
                "--warmup-steps", str(args.warmup_steps), "--batch-size", str(args.batch_size),
                "--num-examples", str(args.num_examples), "--rows", str(args.rows),
                "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
    pairs = []
    for pair in range(args.paired_runs):
        order = _common.BACKENDS if pair % 2 == 0 else _common.BACKENDS[::-1]
        ratios = {}
        for backend in order:
            code, out = _common.run_with_backend(__file__, sub_argv, backend)
            if code:
                print(f"the {backend} run failed (exit code {code})")
                return code
            ratios[backend] = backend_ratio(out, backend)
        pairs.append(ratios)
    print(paired_summary(pairs))
    return 0


def backend_ratio(output, backend):
    """The Flipout / Dense ratio printed by one backend's run, as a float (nan if not timed)."""
    label = BACKEND_RATIO[backend]
    for line in output.splitlines():
        if line.startswith(label):
            value = line[len(label):].split()[0]
            return float("nan") if value == "n/a" else float(value)
    raise RuntimeError(f"the {backend} run printed no line {label.strip()!r}")


def paired_summary(pairs):
    """The report of `--paired-runs`: one line per pair, then the median JAX / TF quotient."""
    lines = ["", "Flipout / Dense step ratio on each backend, pairs of runs back to back"]
    quotients = []
    for index, ratios in enumerate(pairs, 1):
        quotient = ratios["jax"] / ratios["tensorflow"]
        quotients.append(quotient)
        lines.append(f"  pair {index}: TensorFlow {ratios['tensorflow']:.2f}, "
                     f"JAX {ratios['jax']:.2f}, JAX / TensorFlow {quotient:.3f}")
    median = float(np.median(quotients))
    verdict = "PASS" if median <= 1.1 else "MISS"
    lines.append(f"ratio JAX Flipout/Dense over TensorFlow's [median of {len(pairs)} pairs]: "
                 f"{median:.3f}   (range {min(quotients):.3f}-{max(quotients):.3f}; "
                 f"target <= 1.1: {verdict})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
