"""The measurements of run.py, in the process that has KERAS_BACKEND=jax set.

    KERAS_BACKEND=jax python benchmarks/gpu/_worker.py --steps 50 ...

(run.py starts it with the right environment.) Keras picks its backend at
import, so this process must start with KERAS_BACKEND=jax. Nothing here needs
TensorFlow: the data are NumPy batches, the Dense floor is a `jax.jit` of
the model's stateless call (benchmarks/_jax_floor.py). Timing helpers are
those of benchmarks/_timing.py.
"""

import argparse
import importlib.metadata
import os
import pathlib
import platform
import sys
import time

# benchmarks/ for _timing (not the repository root: tfp_bnn comes from where it is installed).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import _jax_floor  # noqa: E402
import _timing  # noqa: E402

# The MLP of benchmarks/train_step.py and predict.py (benchmarks/_common.py).
INPUT_DIM, HIDDEN, CLASSES = 784, (400, 400), 10
NUM_EXAMPLES = 60000  # the N of the KL weight 1/N, MNIST-sized
ROWS = 4096  # synthetic rows held in memory, cycled


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    for name in ("steps", "repeats", "warmup-steps", "samples", "predict-inputs",
                 "batch-size", "seed"):
        parser.add_argument(f"--{name}", type=int, required=True)
    return parser.parse_args(argv)


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_lines(tfp_bnn):
    devices = jax.devices()
    where = getattr(tfp_bnn, "__file__", None) if tfp_bnn else None
    return [
        f"python {platform.python_version()} on {platform.machine()} ({platform.system()})",
        f"jax {jax.__version__}, jaxlib {_version('jaxlib')}, keras {keras.__version__} "
        f"(backend {keras.backend.backend()}), tfp-bnn {_version('tfp-bnn')}"
        + (f" ({where})" if where else ""),
        f"tensorflow-probability {_version('tensorflow-probability')}, tfp-nightly "
        f"{_version('tfp-nightly')}, tensorflow {_version('tensorflow')}",
        f"device: {jax.default_backend()}: " + ", ".join(
            f"{d.device_kind} ({d.platform})" for d in devices[:4])
        + (f" and {len(devices) - 4} more" if len(devices) > 4 else ""),
        f"cpu cores: {os.cpu_count()}",
    ]


def mlp(layer_fn):
    return keras.Sequential([keras.Input((INPUT_DIM,))]
                            + [layer_fn(units, "relu") for units in HIDDEN]
                            + [layer_fn(CLASSES, None)])


def batches(args):
    """A function returning an endless iterator over fixed synthetic MNIST-shaped batches."""
    rng = np.random.default_rng(args.seed)
    x = rng.random((ROWS, INPUT_DIM), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=(ROWS,)).astype("int32")
    cut = list(range(0, ROWS - args.batch_size + 1, args.batch_size))

    def endless():
        while True:
            for start in cut:
                yield x[start:start + args.batch_size], y[start:start + args.batch_size]

    return endless


def train_variant(name, build, data):
    """A `_timing.Variant` training `build()`'s compiled model; a failing build is reported."""
    state = {}

    def fit_steps(steps):
        if "model" not in state:
            model = build()
            model.compile(optimizer=keras.optimizers.Adam(1e-3),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            state["model"] = model
        timer = _timing.step_timer(keras.callbacks.Callback, wait=jax.block_until_ready)
        state["model"].fit(data(), epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
                           callbacks=[timer])
        return timer.times

    variant = _timing.Variant(name, fit_steps)
    variant.state = state
    return variant


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() != "jax":
        print(f"this process runs Keras on {keras.backend.backend()!r}: set KERAS_BACKEND=jax")
        return 2
    keras.utils.set_random_seed(args.seed)
    try:
        import tfp_bnn  # noqa: PLC0415
    except Exception as error:  # noqa: BLE001 - the benchmark goes on with what runs
        tfp_bnn = None
        why = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        if isinstance(error, ModuleNotFoundError) and error.name == "tensorflow":
            why += " (a module imported TensorFlow at import time: a defect on JAX)"
        print(f"tfp_bnn does not import here, its rows are skipped: {why}")
    print(f"== tfp_bnn on Keras' JAX backend: 784-400-400-10 MLP, Adam, batch "
          f"{args.batch_size}, KL weight 1/{NUM_EXAMPLES} ==")
    for line in machine_lines(tfp_bnn):
        print(line)
    if os.environ.get("JAX_PLATFORMS") != "cpu" and jax.default_backend() == "cpu":
        print("jax sees no GPU (a jaxlib without CUDA?): the figures below are CPU figures")
    print(f"timing: {args.warmup_steps} warm-up steps, then {args.repeats} interleaved rounds "
          f"x {args.steps} steps per variant (first step of each fit call not timed)",
          flush=True)

    data = batches(args)
    seeds = iter(range(args.seed * 100 + 1, args.seed * 100 + 100, 3))
    train = {"dense": train_variant("keras.layers.Dense [JAX]",
                                    lambda: mlp(keras.layers.Dense), data)}
    if tfp_bnn is not None:
        train["flipout"] = train_variant(
            "tfp_bnn DenseFlipout [JAX]",
            lambda: mlp(lambda units, act: tfp_bnn.layers.DenseFlipout(
                units, activation=act, kl_weight=1.0 / NUM_EXAMPLES, seed=next(seeds))),
            data)
    for variant in train.values():
        print(f"  warming up {variant.name} ...", flush=True)
        variant.warm_up(args.warmup_steps)
    if "flipout" in train and not train["flipout"].ok:
        print(f"DenseFlipout does not train on JAX yet, its rows are skipped: "
              f"{train['flipout'].error}")
    _timing.run_round_robin(list(train.values()), args.repeats, args.steps,
                            log=lambda msg: print(msg, flush=True))

    # Monte Carlo prediction: T samples over the inputs, against T Dense forward passes.
    rng = np.random.default_rng(args.seed + 1)
    x = rng.random((args.predict_inputs, INPUT_DIM), dtype=np.float32)
    dense_model = train["dense"].state.get("model") or mlp(keras.layers.Dense)
    predict = {"floor": _timing.timed(f"keras Dense forward x {args.samples} (jit)",
                                      _jax_floor.dense_floor(dense_model, x, args.samples))}
    flipout = train.get("flipout")
    flipout_model = flipout.state.get("model") if flipout is not None and flipout.ok else None
    if flipout_model is not None:
        predict["sample"] = _timing.timed(
            f"tfp_bnn.predict.sample(model, x, {args.samples})",
            lambda: np.asarray(tfp_bnn.predict.sample(flipout_model, x, args.samples)))
    for variant in predict.values():
        print(f"  warming up {variant.name} ...", flush=True)
        variant.warm_up(1)
    if "sample" in predict and not predict["sample"].ok:
        print(f"tfp_bnn.predict.sample does not run on JAX yet: {predict['sample'].error}")
    # Two calls per round: the first of each call is dropped by Variant.run.
    _timing.run_round_robin(list(predict.values()), args.repeats, 2,
                            log=lambda msg: print(msg, flush=True))

    ratios = []
    if "flipout" in train:
        ratios.append(("ratio tfp_bnn Flipout / keras Dense [JAX train step]",
                       train["flipout"], train["dense"], ("<=", 2.2)))
    if "sample" in predict:
        ratios.append(("ratio tfp_bnn.predict.sample / Dense floor [JAX throughput]",
                       predict["sample"], predict["floor"], ("<=", 2.0)))
    _timing.print_report(
        [("train step; median per-step time", train, "dense"),
         (f"Monte Carlo predict, {args.predict_inputs} inputs, T = {args.samples}; "
          "median per prediction", predict, "floor")], ratios)
    print("(n = timed steps; IQR = 25th-75th percentile; 'x base' = median / keras Dense of "
          "the same table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
