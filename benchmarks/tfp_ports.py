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
accuracy (digits), and the training time. Case 5 (VariationalGaussianProcess)
has no tfp_bnn port.
"""

import argparse
import math
import os
import pathlib
import platform
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# The regression notebook's generator (facts from the notebook).
W0, B0 = 0.125, 5.0
X_RANGE = (-20.0, 60.0)
NUM_TRAIN = NUM_TEST = 150
DATA_SEED, TEST_SEED = 43, 44
REG_BATCH, REG_EPOCHS, REG_LR = 32, 1000, 0.01
VGP_INDUCING, VGP_NOISE_INIT = 40, 0.54

# The LeNet program's settings.
LENET_BATCH, LENET_LR, LENET_MC = 128, 1e-3, 50
DIGITS_SPLIT_SEED = 0

CASES = ("lenet", "case1", "case2", "case3", "case4", "case5")
CASE_TITLES = {
    "lenet": "LeNet-5 Flipout, 8x8 digits",
    "case1": "regression 1: no uncertainty",
    "case2": "regression 2: aleatoric",
    "case3": "regression 3: epistemic",
    "case4": "regression 4: aleatoric + epistemic",
    "case5": "regression 5: variational GP",
}


class NotAvailable(Exception):
    """A tfp_bnn name the port needs is not importable (yet)."""


# --------------------------------------------------------------------------- data

def _noise_std(x):
    g = (x - X_RANGE[0]) / (X_RANGE[1] - X_RANGE[0])
    return 3.0 * (0.25 + g ** 2)


def _true_mean(x):
    return W0 * x * (1.0 + np.sin(x)) + B0


def regression_data():
    """(x, y, x_test, y_test), x of shape (N, 1), y of shape (N, 1), float64.

    The training set reproduces the notebook's draws: the legacy NumPy
    generator seeded with 43, uniform inputs first, then standard normals.
    """
    rng = np.random.RandomState(DATA_SEED)
    x = (X_RANGE[1] - X_RANGE[0]) * rng.rand(NUM_TRAIN) + X_RANGE[0]
    y = _true_mean(x) + rng.randn(NUM_TRAIN) * _noise_std(x)
    x_test = np.linspace(*X_RANGE, num=NUM_TEST).astype(np.float32).astype(np.float64)
    test_rng = np.random.RandomState(TEST_SEED)
    y_test = _true_mean(x_test) + test_rng.randn(NUM_TEST) * _noise_std(x_test)
    return x[:, None], y[:, None], x_test[:, None], y_test[:, None]


def digits_data():
    """(x_train, y_train, x_test, y_test): 8x8x1 images in [0, 1], int labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    return train_test_split(images, digits.target.astype(np.int32), test_size=0.2,
                            random_state=DIGITS_SPLIT_SEED, stratify=digits.target)


def _batches(x, y, batch_size, epochs, seed, dtype="float32"):
    """Shuffled batches of `epochs` passes, as `fit(epochs=, batch_size=)` draws them."""
    data = tf.data.Dataset.from_tensor_slices((x.astype(dtype), y.astype(
        dtype if y.dtype.kind == "f" else "int32")))
    return (data.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
            .batch(batch_size).repeat(epochs))


# ------------------------------------------------------------------------ scoring

def _mixture_scores(log_probs, means, y):
    """NLL of the equal mixture over passes, and RMSE of its mean.

    log_probs, means: [passes, n, 1]; y: [n, 1].
    """
    log_probs = np.asarray(log_probs, np.float64)
    passes = log_probs.shape[0]
    top = log_probs.max(axis=0)
    log_mix = top + np.log(np.exp(log_probs - top).sum(axis=0)) - math.log(passes)
    mean = np.asarray(means, np.float64).mean(axis=0)
    return float(-log_mix.mean()), float(np.sqrt(np.mean((mean - y) ** 2)))


def _classification_scores(probs, labels):
    """NLL of the averaged class probabilities, and accuracy of their argmax."""
    mean = np.asarray(probs, np.float64).mean(axis=0)
    picked = np.clip(mean[np.arange(len(labels)), labels], 1e-300, None)
    return float(-np.log(picked).mean()), float(np.mean(mean.argmax(axis=1) == labels))


# ------------------------------------------------------------------ TFP originals

def _tfp_modules():
    import tf_keras  # noqa: F401  (first: tfp.layers is built on it)
    import tensorflow_probability as tfp

    return tf_keras, tfp


def tfp_lenet(data, epochs, seed, mc_samples):
    tf_keras, tfp = _tfp_modules()
    tfd = tfp.distributions
    x_train, x_test, y_train, y_test = data
    num_train = len(x_train)
    tf_keras.utils.set_random_seed(seed)

    def divergence(q, p, _):  # the program's KL / N, per layer
        return tfd.kl_divergence(q, p) / num_train

    def conv(filters):
        return tfp.layers.Convolution2DFlipout(filters, kernel_size=5, padding="SAME",
                                               activation="relu",
                                               kernel_divergence_fn=divergence)

    def pool():
        return tf_keras.layers.MaxPooling2D(pool_size=2, strides=2, padding="SAME")

    model = tf_keras.Sequential([
        tf_keras.layers.InputLayer(input_shape=x_train.shape[1:]),
        conv(6), pool(), conv(16), pool(), conv(120),
        tf_keras.layers.Flatten(),
        tfp.layers.DenseFlipout(84, activation="relu", kernel_divergence_fn=divergence),
        tfp.layers.DenseFlipout(10, kernel_divergence_fn=divergence),
    ])
    model.compile(optimizer=tf_keras.optimizers.Adam(LENET_LR),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    model.fit(_batches(x_train, y_train, LENET_BATCH, epochs, seed), verbose=0)
    seconds = time.perf_counter() - start
    probs = [tf.nn.softmax(model(x_test)).numpy() for _ in range(mc_samples)]
    return (*_classification_scores(probs, y_test), seconds)


def _tfp_posterior_mean_field(tf_keras, tfp):
    """The notebook's mean-field posterior: VariableLayer(2n) -> Independent Normal."""
    tfd = tfp.distributions
    offset = float(np.log(np.expm1(1.0)))

    def make(kernel_size, bias_size=0, dtype=None):
        n = kernel_size + bias_size
        return tf_keras.Sequential([
            tfp.layers.VariableLayer(2 * n, dtype=dtype),
            tfp.layers.DistributionLambda(lambda t: tfd.Independent(
                tfd.Normal(loc=t[..., :n], scale=1e-5 + tf.nn.softplus(offset + t[..., n:])),
                reinterpreted_batch_ndims=1)),
        ])

    return make


def _tfp_prior_trainable(tf_keras, tfp):
    """The notebook's trainable prior: VariableLayer(n) -> Independent Normal(t, 1)."""
    tfd = tfp.distributions

    def make(kernel_size, bias_size=0, dtype=None):
        n = kernel_size + bias_size
        return tf_keras.Sequential([
            tfp.layers.VariableLayer(n, dtype=dtype),
            tfp.layers.DistributionLambda(lambda t: tfd.Independent(
                tfd.Normal(loc=t, scale=1.0), reinterpreted_batch_ndims=1)),
        ])

    return make


def _normal_unit(tfd):
    return lambda t: tfd.Normal(loc=t, scale=1.0)


def _normal_learned(tfd, factor):
    return lambda t: tfd.Normal(loc=t[..., :1],
                                scale=1e-3 + tf.math.softplus(factor * t[..., 1:]))


def _negloglik(y, rv_y):
    return -rv_y.log_prob(y)


def tfp_regression(case, data, epochs, seed, mc_samples):
    tf_keras, tfp = _tfp_modules()
    tfd = tfp.distributions
    x, y, x_test, y_test = data
    tf_keras.utils.set_random_seed(seed)
    if case == "case1":
        body = [tf_keras.layers.Dense(1), tfp.layers.DistributionLambda(_normal_unit(tfd))]
    elif case == "case2":
        body = [tf_keras.layers.Dense(2),
                tfp.layers.DistributionLambda(_normal_learned(tfd, 0.05))]
    else:
        units, head = ((1, _normal_unit(tfd)) if case == "case3"
                       else (2, _normal_learned(tfd, 0.01)))
        body = [tfp.layers.DenseVariational(units, _tfp_posterior_mean_field(tf_keras, tfp),
                                            _tfp_prior_trainable(tf_keras, tfp),
                                            kl_weight=1.0 / len(x)),
                tfp.layers.DistributionLambda(head)]
    model = tf_keras.Sequential([tf_keras.layers.InputLayer(input_shape=(1,))] + body)
    model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate=REG_LR), loss=_negloglik)
    start = time.perf_counter()
    model.fit(_batches(x, y, REG_BATCH, epochs, seed), verbose=0)
    seconds = time.perf_counter() - start
    passes = 1 if case in ("case1", "case2") else mc_samples
    x_t = x_test.astype(np.float32)
    outputs = [model(x_t) for _ in range(passes)]
    log_probs = [d.log_prob(y_test.astype(np.float32)).numpy() for d in outputs]
    means = [d.mean().numpy() for d in outputs]
    return (*_mixture_scores(log_probs, means, y_test), seconds)


def tfp_vgp(data, epochs, seed):
    """Case 5 in float64, as the notebook runs it; floatx is restored after."""
    tf_keras, tfp = _tfp_modules()
    x, y, x_test, y_test = data
    previous = tf_keras.backend.floatx()
    tf_keras.backend.set_floatx("float64")
    try:
        tf_keras.utils.set_random_seed(seed)

        class RBFKernelFn(tf_keras.layers.Layer):
            """Holds the two kernel parameters; softplus(0.1 a) and softplus(5 l)."""

            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self._amplitude = self.add_weight(name="amplitude", shape=(),
                                                  initializer="zeros", dtype="float64")
                self._length_scale = self.add_weight(name="length_scale", shape=(),
                                                     initializer="zeros", dtype="float64")

            def call(self, inputs):
                return inputs

            @property
            def kernel(self):
                return tfp.math.psd_kernels.ExponentiatedQuadratic(
                    amplitude=tf.nn.softplus(0.1 * self._amplitude),
                    length_scale=tf.nn.softplus(5.0 * self._length_scale))

        inducing = np.linspace(*X_RANGE, num=VGP_INDUCING)[:, None]
        model = tf_keras.Sequential([
            tf_keras.layers.InputLayer(input_shape=(1,)),
            tf_keras.layers.Dense(1, kernel_initializer="ones", use_bias=False),
            tfp.layers.VariationalGaussianProcess(
                num_inducing_points=VGP_INDUCING,
                kernel_provider=RBFKernelFn(),
                event_shape=[1],
                inducing_index_points_initializer=tf_keras.initializers.Constant(inducing),
                unconstrained_observation_noise_variance_initializer=(
                    tf_keras.initializers.Constant(VGP_NOISE_INIT))),
        ])
        kl_weight = REG_BATCH / len(x)

        def loss(y_true, rv_y):
            return rv_y.variational_loss(y_true, kl_weight=np.float64(kl_weight))

        model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate=REG_LR), loss=loss)
        start = time.perf_counter()
        model.fit(_batches(x, y, REG_BATCH, epochs, seed, dtype="float64"), verbose=0)
        seconds = time.perf_counter() - start
        # Per-point predictive marginals N(mean, stddev^2) at the test inputs.
        yhat = model(x_test)
        mean = np.reshape(yhat.mean().numpy(), (-1, 1))
        std = np.reshape(yhat.stddev().numpy(), (-1, 1))
        log_prob = (-0.5 * ((y_test - mean) / std) ** 2 - np.log(std)
                    - 0.5 * math.log(2 * math.pi))
        return (float(-log_prob.mean()), float(np.sqrt(np.mean((mean - y_test) ** 2))),
                seconds)
    finally:
        tf_keras.backend.set_floatx(previous)


# ------------------------------------------------------------------ tfp_bnn ports

def _ours(*names):
    """tfp_bnn attributes by dotted name, or NotAvailable naming the missing one."""
    try:
        import tfp_bnn
    except Exception as error:  # noqa: BLE001  (a package mid-edit must not stop the TFP side)
        raise NotAvailable(f"tfp_bnn does not import: {type(error).__name__}: {error}") from None

    found = []
    for name in names:
        value = tfp_bnn
        try:
            for part in name.split("."):
                value = getattr(value, part)
        except AttributeError:
            raise NotAvailable(f"tfp_bnn.{name} is not available yet") from None
        found.append(value)
    return found


def _ours_notebook_variational():
    """DenseVariational arguments equal to the notebook's posterior_mean_field / prior_trainable.

    posterior_mean_field: loc 0, scale 1e-5 + softplus(log(e - 1) + t), t = 0
    at the start; prior_trainable: N(t, 1) with a trainable t = 0 at the start.
    """
    mean_field_normal, trainable_normal_prior = _ours("posteriors.MeanFieldNormal",
                                                      "priors.TrainableNormalPrior")
    try:
        posterior = mean_field_normal(rho_init=math.log(math.e - 1.0), rho_init_stddev=0.0,
                                      scale_offset=1e-5)
    except TypeError:
        raise NotAvailable("tfp_bnn.posteriors.MeanFieldNormal(scale_offset=) is not "
                           "available yet") from None
    return {"posterior": posterior, "prior": trainable_normal_prior(),
            "kernel_initializer": "zeros", "bias_initializer": "zeros"}


def ours_lenet(data, epochs, seed, mc_samples):
    import keras

    conv2d_flipout, dense_flipout = _ours("layers.Conv2DFlipout", "layers.DenseFlipout")
    x_train, x_test, y_train, y_test = data
    kl_weight = 1.0 / len(x_train)
    keras.utils.set_random_seed(seed)

    def conv(filters):
        return conv2d_flipout(filters, kernel_size=5, padding="same", activation="relu",
                              kl_weight=kl_weight)

    def pool():
        return keras.layers.MaxPooling2D(pool_size=2, strides=2, padding="same")

    model = keras.Sequential([
        keras.Input(x_train.shape[1:]),
        conv(6), pool(), conv(16), pool(), conv(120),
        keras.layers.Flatten(),
        dense_flipout(84, activation="relu", kl_weight=kl_weight),
        dense_flipout(10, kl_weight=kl_weight),
    ])
    model.compile(optimizer=keras.optimizers.Adam(LENET_LR),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    model.fit(_batches(x_train, y_train, LENET_BATCH, epochs, seed), shuffle=False, verbose=0)
    seconds = time.perf_counter() - start
    probs = [tf.nn.softmax(model(x_test, training=False)).numpy() for _ in range(mc_samples)]
    return (*_classification_scores(probs, y_test), seconds)


def ours_regression(case, data, epochs, seed, mc_samples):
    import keras
    import tensorflow_probability as tfp

    tfd = tfp.distributions
    (distribution_lambda,) = _ours("layers.DistributionLambda")
    (distribution_of,) = _ours("distributions.distribution_of")
    x, y, x_test, y_test = data
    keras.utils.set_random_seed(seed)
    if case == "case1":
        body = [keras.layers.Dense(1), distribution_lambda(_normal_unit(tfd))]
    elif case == "case2":
        body = [keras.layers.Dense(2), distribution_lambda(_normal_learned(tfd, 0.05))]
    else:
        (dense_variational,) = _ours("layers.DenseVariational")
        units, head = ((1, _normal_unit(tfd)) if case == "case3"
                       else (2, _normal_learned(tfd, 0.01)))
        body = [dense_variational(units, kl_weight=1.0 / len(x), kl_use_exact=False,
                                  **_ours_notebook_variational()),
                distribution_lambda(head)]
    model = keras.Sequential([keras.Input((1,))] + body)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=REG_LR), loss=_negloglik)
    start = time.perf_counter()
    model.fit(_batches(x, y, REG_BATCH, epochs, seed), shuffle=False, verbose=0)
    seconds = time.perf_counter() - start
    passes = 1 if case in ("case1", "case2") else mc_samples
    x_t = x_test.astype(np.float32)
    outputs = [distribution_of(model(x_t)) for _ in range(passes)]
    log_probs = [d.log_prob(y_test.astype(np.float32)).numpy() for d in outputs]
    means = [d.mean().numpy() for d in outputs]
    return (*_mixture_scores(log_probs, means, y_test), seconds)


# ---------------------------------------------------------------------- driver

def run_case(side, case, args, regression, digits, seed):
    if case == "lenet":
        fn = tfp_lenet if side == "tfp" else ours_lenet
        return fn(digits, args.lenet_epochs, seed, min(args.mc_samples, LENET_MC))
    if case == "case5":
        if side == "ours":
            raise NotAvailable("no Gaussian-process layer in tfp_bnn (not ported)")
        return tfp_vgp(regression, args.epochs, seed)
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
    for name in ("seeds", "epochs", "lenet_epochs", "mc_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
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
        tf_keras, _ = _tfp_modules()
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
