"""The two TFP programs' settings, data, output heads and scores, shared by both sides.

tfp_ports.py trains each program twice, as the TFP original (`_tfp_originals`)
and as the tfp_bnn port (`_tfp_bnn_ports`); everything here is what the two
sides must have in common for the comparison to be like with like.
"""

import math

import numpy as np
import tensorflow as tf

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


def batches(x, y, batch_size, epochs, seed, dtype="float32"):
    """Shuffled batches of `epochs` passes, as `fit(epochs=, batch_size=)` draws them."""
    data = tf.data.Dataset.from_tensor_slices((x.astype(dtype), y.astype(
        dtype if y.dtype.kind == "f" else "int32")))
    return (data.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
            .batch(batch_size).repeat(epochs))


# ------------------------------------------------------------------------ scoring

def mixture_scores(log_probs, means, y):
    """NLL of the equal mixture over passes, and RMSE of its mean.

    log_probs, means: [passes, n, 1]; y: [n, 1].
    """
    log_probs = np.asarray(log_probs, np.float64)
    passes = log_probs.shape[0]
    top = log_probs.max(axis=0)
    log_mix = top + np.log(np.exp(log_probs - top).sum(axis=0)) - math.log(passes)
    mean = np.asarray(means, np.float64).mean(axis=0)
    return float(-log_mix.mean()), float(np.sqrt(np.mean((mean - y) ** 2)))


def gaussian_scores(mean, std, y):
    """NLL of the per-point predictive marginals N(mean, std^2), and RMSE of the mean.

    mean, std: any shape with n elements (reshaped to [n, 1]); y: [n, 1].
    """
    mean = np.reshape(np.asarray(mean, np.float64), (-1, 1))
    std = np.reshape(np.asarray(std, np.float64), (-1, 1))
    log_prob = -0.5 * ((y - mean) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)
    return float(-log_prob.mean()), float(np.sqrt(np.mean((mean - y) ** 2)))


def classification_scores(probs, labels):
    """NLL of the averaged class probabilities, and accuracy of their argmax."""
    mean = np.asarray(probs, np.float64).mean(axis=0)
    picked = np.clip(mean[np.arange(len(labels)), labels], 1e-300, None)
    return float(-np.log(picked).mean()), float(np.mean(mean.argmax(axis=1) == labels))


# ---------------------------------------------------------------- output heads

def normal_unit(tfd):
    """Cases 1 and 3: the output is the mean of a unit-variance Normal."""
    return lambda t: tfd.Normal(loc=t, scale=1.0)


def normal_learned(tfd, factor):
    """Cases 2 and 4: outputs [mean, raw scale], scale = 1e-3 + softplus(factor * raw)."""
    return lambda t: tfd.Normal(loc=t[..., :1],
                                scale=1e-3 + tf.math.softplus(factor * t[..., 1:]))


def negloglik(y, rv_y):
    """The notebook's loss: the negative log-likelihood of the output distribution."""
    return -rv_y.log_prob(y)
