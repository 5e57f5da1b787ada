"""The 8x8 handwritten digits of scikit-learn, split for image classifiers.

1797 grey-scale images of the digits 0-9 (about 180 per class), 8x8 pixels
with integer intensities 0-16: the optical-recognition digits of Alpaydin
and Kaynak (1998, UCI), as embedded in scikit-learn
(`sklearn.datasets.load_digits` reads a file inside the scikit-learn
package; nothing is downloaded). Small enough to train a Bayesian CNN on two
CPU cores in seconds, which is what the covariate-shift evaluation
(`zoo.experiments.covariate_shift`) needs.
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data.uci import check_fraction
from tfp_bnn.data.uci import num_held_out

NUM_CLASSES = 10
IMAGE_SHAPE = (8, 8, 1)
# The digits' pixel values are counts of set bits in 4x4 blocks: 0..16.
MAX_PIXEL = 16.0

# tfp_bnn is installed from GitHub or a clone, not from PyPI, so the hint names scikit-learn
# (`pip install -e ".[digits]"` in a clone adds the same).
_INSTALL_HINT = "pip install scikit-learn (tfp_bnn's extra 'digits')"


def _sklearn_digits():
    """(images [1797, 8, 8] float64 in 0..16, labels [1797] int) from scikit-learn."""
    try:
        from sklearn import datasets
    except ImportError as error:
        raise ImportError(
            "tfp_bnn.data.load_digits needs scikit-learn, which ships the 8x8 digits "
            f"(no download); install it with: {_INSTALL_HINT}"
        ) from error
    bunch = datasets.load_digits()
    return np.asarray(bunch.images), np.asarray(bunch.target)


def stratified_split(labels, test_fraction: float = 0.2, seed: int = 0) -> tuple:
    """Seeded split of example indices that keeps the class proportions.

    Each class c with n_c examples puts round(n_c * test_fraction) of them
    (at least one, and leaving at least one) in the test set, chosen by a
    permutation from `np.random.default_rng(seed)`. The same (labels,
    test_fraction, seed) always gives the same split.

    Args:
        labels: integer class ids, shape [n]; every class needs >= 2 examples.
        test_fraction: share of each class held out, in (0, 1) (default
            0.2); each class holds out round(its size * test_fraction), at
            least one, leaving at least one.
        seed: non-negative int seed of the permutations.

    Returns:
        `(train_index, test_index)` as `tfp_bnn.data.train_test_split` returns.

    Example:
    >>> train, test = stratified_split(np.repeat(np.arange(10), 180), 0.2)
    >>> len(train), len(test)
    (1440, 360)
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"`labels` must be a non-empty 1-D array, got shape {labels.shape}.")
    test_fraction = check_fraction(test_fraction)
    rng = np.random.default_rng(check.seed(seed))
    train, test = [], []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < 2:
            raise ValueError(
                f"Class {label.item()!r} has {len(members)} example; a stratified split "
                "needs >= 2 per class."
            )
        num_test = num_held_out(len(members), test_fraction)
        members = rng.permutation(members)
        test.append(members[:num_test])
        train.append(members[num_test:])
    return (np.sort(np.concatenate(train)).astype(np.int64),
            np.sort(np.concatenate(test)).astype(np.int64))


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> dict:
    """The 8x8 digits as [n, 8, 8, 1] images in [0, 1], split per class.

    Pixels are divided by 16 (their maximum), so that the corruptions of
    `tfp_bnn.data.corruptions` act on the [0, 1] scale of CIFAR-10-C.

    Args:
        seed: int seed of the stratified split.
        test_fraction: share of each class held out, in (0, 1); the default
            0.2 gives 1438 training and 359 test images.

    Returns:
        dict with `x_train`, `x_test` (float32, [n, 8, 8, 1], in [0, 1]) and
        `y_train`, `y_test` (int32 class ids 0-9, [n]).

    Raises:
        ImportError: if scikit-learn is not installed.

    Example:
    >>> data = load_digits(seed=0)
    >>> data["x_train"].shape, data["x_test"].shape
    ((1438, 8, 8, 1), (359, 8, 8, 1))
    """
    # Checked before scikit-learn is imported, so a bad argument fails first.
    seed, test_fraction = check.seed(seed), check_fraction(test_fraction)
    images, labels = _sklearn_digits()
    train, test = stratified_split(labels, test_fraction=test_fraction, seed=seed)
    x = (images / MAX_PIXEL).astype(np.float32)[..., None]
    y = labels.astype(np.int32)
    return {
        "x_train": x[train],
        "y_train": y[train],
        "x_test": x[test],
        "y_test": y[test],
    }
