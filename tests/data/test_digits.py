"""Tests of tfp_bnn.data.digits: the scikit-learn digits, scaled and split per class."""

import sys

import numpy as np
import pytest

from tfp_bnn.data.digits import load_digits
from tfp_bnn.data.digits import stratified_split

sklearn_datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture(scope="module")
def digits():
    return load_digits(seed=0)


@pytest.fixture(scope="module")
def reference():
    bunch = sklearn_datasets.load_digits()
    return bunch.images, bunch.target


def test_shapes_dtypes_and_range(digits):
    assert digits["x_train"].shape == (1438, 8, 8, 1)
    assert digits["x_test"].shape == (359, 8, 8, 1)
    assert digits["y_train"].shape == (1438,)
    assert digits["y_test"].shape == (359,)
    for key in ("x_train", "x_test"):
        assert digits[key].dtype == np.float32
        assert digits[key].min() == 0.0 and digits[key].max() == 1.0
    for key in ("y_train", "y_test"):
        assert digits[key].dtype == np.int32
        assert set(np.unique(digits[key])) == set(range(10))


def test_images_are_pixels_over_16_with_their_labels(digits, reference):
    images, labels = reference
    x = np.concatenate([digits["x_train"], digits["x_test"]])[..., 0]
    y = np.concatenate([digits["y_train"], digits["y_test"]])
    # Every returned (image, label) is a scikit-learn image / 16 with its label,
    # and every scikit-learn image is returned once.
    keys = {(img.tobytes(), int(label)) for img, label in
            zip((images / 16.0).astype(np.float32), labels)}
    returned = [(img.tobytes(), int(label)) for img, label in zip(x, y)]
    assert len(returned) == len(images) == 1797
    assert set(returned) == keys
    assert len(set(returned)) == len(keys)


def test_split_is_stratified(digits, reference):
    _, labels = reference
    total = np.bincount(labels, minlength=10)
    test = np.bincount(digits["y_test"], minlength=10)
    np.testing.assert_array_equal(test, np.round(total * 0.2).astype(int))
    np.testing.assert_array_equal(np.bincount(digits["y_train"], minlength=10), total - test)


def test_same_seed_same_split_other_seed_other_split(digits):
    again = load_digits(seed=0)
    for key in digits:
        np.testing.assert_array_equal(digits[key], again[key])
    other = load_digits(seed=1)
    assert other["x_test"].shape == digits["x_test"].shape
    assert not np.array_equal(other["x_test"], digits["x_test"])


def test_test_fraction():
    data = load_digits(seed=0, test_fraction=0.5)
    assert len(data["x_test"]) + len(data["x_train"]) == 1797
    assert abs(len(data["x_test"]) - 1797 / 2) <= 5
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.0)


def test_stratified_split_indices():
    labels = np.repeat(np.arange(3), [10, 5, 2])
    train, test = stratified_split(labels, test_fraction=0.2, seed=3)
    assert train.dtype == test.dtype == np.int64
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(17))
    # round(10 * 0.2) = 2, round(5 * 0.2) = 1, and the pair keeps one on each side.
    np.testing.assert_array_equal(np.bincount(labels[test]), [2, 1, 1])
    with pytest.raises(ValueError, match="Class 2 has 1 example"):
        stratified_split(np.array([0, 0, 1, 1, 2]), 0.2)
    with pytest.raises(ValueError, match="1-D"):
        stratified_split(np.zeros((2, 2)), 0.2)


def test_missing_scikit_learn_says_how_to_install(monkeypatch):
    # None in sys.modules makes `import sklearn` raise ImportError.
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"install it with: pip install scikit-learn \("):
        load_digits()
