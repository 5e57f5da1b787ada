"""Monte Carlo prediction speed: tfp_bnn.predict against a loop of model calls.

    python benchmarks/predict.py           # ~3-5 minutes on 2 CPU cores
    python benchmarks/predict.py --quick   # smoke run, small sizes
    python benchmarks/predict.py --backend jax   # on Keras' JAX backend (see main_jax)

Model: the 784-400-400-10 MLP of tfp_bnn `DenseFlipout` layers (relu, logits
out), T = 100 samples, random MNIST-shaped inputs. Measured in one run, in
interleaved rounds, medians reported (see `_timing.py`):

(a) Serving latency on one batch of 32 inputs:
    - baseline: a Python loop of 100 `model.predict(x)` calls, what TFP's
      own probabilistic-layers example does to get Monte Carlo samples;
    - `tfp_bnn.predict.sample(model, x, 100)` (the Python API);
    - the SavedModel of `tfp_bnn.export.export_predictive`, loaded with
      `tf.saved_model.load`, `serve(x, 100)` (probabilities, entropies).
    Target: baseline / ours >= 10.

(b) Throughput on 10,000 inputs:
    - floor: the same MLP built from `keras.layers.Dense`, its compiled
      forward pass over the 10,000 inputs run 100 times;
    - `tfp_bnn.predict.sample(model, x, 100)` and
      `tfp_bnn.predict.classification(model, x, 100)` (with the summaries).
    Target: ours / floor <= 2.0.
"""

import argparse
import os
import sys
import tempfile

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path

import keras
import numpy as np
import tensorflow as tf

import _jax_floor
import _timing
import tfp_bnn


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100, help="T")
    parser.add_argument("--latency-batch", type=int, default=32)
    parser.add_argument("--throughput-inputs", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0)
    _common.add_backend_flag(parser)
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.throughput_inputs, args.repeats = 5, 300, 1
    _common.require_positive(parser, args,
                             ("samples", "latency_batch", "throughput_inputs", "repeats"))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.backend and args.backend != keras.backend.backend():
        return _common.rerun_with_backend(__file__, argv, args.backend)
    if _common.is_jax():
        return main_jax(args)
    keras.utils.set_random_seed(args.seed)
    tf.get_logger().setLevel("ERROR")
    samples = args.samples
    print(f"== Monte Carlo prediction benchmark: 784-400-400-10 DenseFlipout MLP, T = {samples} ==")
    for line in _timing.machine_info():
        print(line)
    x_small, x_large, flipout, dense = _inputs_and_models(args)
    dense_forward = tf.function(lambda x: dense(x, training=False))
    x_large_tensor = tf.constant(x_large)

    export_dir = tempfile.mkdtemp(prefix="tfp_bnn_bench_")
    path = os.path.join(export_dir, "predictive")
    tfp_bnn.export.export_predictive(flipout, path, task="classification")
    served = tf.saved_model.load(path)
    num = tf.constant(samples)

    def predict_loop():
        return np.stack([flipout.predict(x_small, verbose=0) for _ in range(samples)])

    def dense_floor():
        for _ in range(samples):
            dense_forward(x_large_tensor).numpy()

    latency = {
        "loop": _timing.timed(f"loop of {samples} model.predict(x)", predict_loop),
        "sample": _timing.timed(f"tfp_bnn.predict.sample(model, x, {samples})",
                                lambda: tfp_bnn.predict.sample(flipout, x_small, samples)),
        "served": _timing.timed(f"exported SavedModel serve(x, {samples})",
                                lambda: served.serve(x_small, num)["probabilities"].numpy()),
    }
    throughput = _throughput(
        _timing.timed(f"keras Dense forward x {samples}", dense_floor), flipout, x_large, samples)
    return _measure_and_report(latency, throughput, args)


def main_jax(args):
    """The same latency and throughput ratios on Keras' JAX backend.

    The exported SavedModel (`tfp_bnn.export`, `tf.saved_model.load`) is
    TensorFlow only and is skipped with a printed line; the Dense floor is
    the model's stateless call under `jax.jit` in place of `tf.function`.
    """
    keras.utils.set_random_seed(args.seed)
    samples = args.samples
    print(f"== Monte Carlo prediction benchmark: 784-400-400-10 DenseFlipout MLP, T = {samples}"
          ", Keras on JAX ==")
    for line in _timing.machine_info():
        print(line)
    print("skipped on JAX: the exported SavedModel (tfp_bnn.export, tf.saved_model.load: "
          "TensorFlow only)")
    x_small, x_large, flipout, dense = _inputs_and_models(args)

    def predict_loop():
        return np.stack([flipout.predict(x_small, verbose=0) for _ in range(samples)])

    latency = {
        "loop": _timing.timed(f"loop of {samples} model.predict(x)", predict_loop),
        "sample": _timing.timed(f"tfp_bnn.predict.sample(model, x, {samples})",
                                lambda: tfp_bnn.predict.sample(flipout, x_small, samples)),
    }
    throughput = _throughput(
        _timing.timed(f"keras Dense forward x {samples} (jax.jit)",
                      _jax_floor.dense_floor(dense, x_large, samples)),
        flipout, x_large, samples)
    return _measure_and_report(latency, throughput, args)


def _inputs_and_models(args):
    """The seeded latency and throughput inputs, the Flipout MLP and the Dense MLP."""
    rng = np.random.default_rng(args.seed)
    x_small = rng.random((args.latency_batch, _common.INPUT_DIM), dtype=np.float32)
    x_large = rng.random((args.throughput_inputs, _common.INPUT_DIM), dtype=np.float32)
    seeds = iter(range(1, 100))
    flipout = _common.mlp(lambda units, act: tfp_bnn.layers.DenseFlipout(
        units, activation=act, kl_weight=1e-4, seed=next(seeds)))
    dense = _common.mlp(lambda units, act: keras.layers.Dense(units, activation=act))
    return x_small, x_large, flipout, dense


def _throughput(floor, flipout, x_large, samples):
    """The throughput variants: the backend's Dense floor, then tfp_bnn's two predictions."""
    return {
        "floor": floor,
        "sample": _timing.timed(f"tfp_bnn.predict.sample(model, x, {samples})",
                                lambda: tfp_bnn.predict.sample(flipout, x_large, samples)),
        "classification": _timing.timed(
            f"tfp_bnn.predict.classification(model, x, {samples})",
            lambda: tfp_bnn.predict.classification(flipout, x_large, samples)),
    }


def _measure_and_report(latency, throughput, args):
    """Warms up every variant, times them round robin, prints both tables and the ratios.

    The exported-serve ratio is printed when `latency` has a "served" variant
    (TensorFlow only).
    """
    variants = list(latency.values()) + list(throughput.values())
    for variant in variants:
        print(f"  warming up {variant.name} ...", flush=True)
        variant.warm_up(1)
    # Two calls per round: the first of each call is dropped by Variant.run.
    _timing.run_round_robin(variants, args.repeats, 2, log=lambda m: print(m, flush=True))
    ratios = [("ratio loop of predict / tfp_bnn.predict.sample [latency]",
               latency["loop"], latency["sample"], (">=", 10))]
    if "served" in latency:
        ratios.append(("ratio loop of predict / exported serve [latency]",
                       latency["loop"], latency["served"], (">=", 10)))
    ratios += [("ratio tfp_bnn.predict.sample / Dense floor [throughput]",
                throughput["sample"], throughput["floor"], ("<=", 2.0)),
               ("ratio tfp_bnn.predict.classification / Dense floor [throughput]",
                throughput["classification"], throughput["floor"], ("<=", 2.0))]
    _timing.print_report(
        [(f"(a) latency, one batch of {args.latency_batch} inputs; median per prediction",
          latency, "loop"),
         (f"(b) throughput, {args.throughput_inputs} inputs; median per prediction",
          throughput, "floor")],
        ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
