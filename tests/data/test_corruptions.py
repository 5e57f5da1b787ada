"""Tests of tfp_bnn.data.corruptions: the CIFAR-10-C-style shifts of 8x8 images."""

import math

import numpy as np
import pytest

from tfp_bnn.data import corruptions
from tfp_bnn.data.corruptions import CORRUPTIONS
from tfp_bnn.data.corruptions import corrupt

NAMES = sorted(CORRUPTIONS)
RANDOM = ("gaussian_noise", "rotation", "translation")


@pytest.fixture(scope="module")
def images():
    # Digit-like test images without scikit-learn: a bright stroke pattern
    # with a dark background, different per image, values in [0, 1].
    rng = np.random.default_rng(0)
    x = np.zeros((120, 8, 8, 1), np.float32)
    for i in range(len(x)):
        r0, c0 = rng.integers(1, 3, size=2)
        x[i, r0:r0 + 5, c0 + 1, 0] = 1.0
        x[i, r0, c0:c0 + 4, 0] = rng.uniform(0.5, 1.0)
        x[i, r0 + rng.integers(2, 5), c0:c0 + 4, 0] = rng.uniform(0.5, 1.0)
    return x


def test_registry_matches_the_functions():
    assert NAMES == ["contrast", "gaussian_blur", "gaussian_noise", "rotation", "translation"]
    for name, fn in CORRUPTIONS.items():
        assert getattr(corruptions, name) is fn


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("intensity", [1, 3, 5])
def test_shape_dtype_and_range(images, name, intensity):
    out = corrupt(images, name, intensity, seed=1)
    assert out.shape == images.shape and out.dtype == np.float32
    assert out.min() >= 0.0 and out.max() <= 1.0
    squeezed = corrupt(images[..., 0], name, intensity, seed=1)
    assert squeezed.shape == images.shape[:3]
    np.testing.assert_array_equal(squeezed, out[..., 0])
    # Integer pixels are accepted and clipped like any other input.
    assert CORRUPTIONS[name](np.full((2, 8, 8), 3), intensity, 0).max() <= 1.0


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_given_the_seed(images, name):
    first = corrupt(images, name, 3, seed=7)
    np.testing.assert_array_equal(first, corrupt(images, name, 3, seed=7))
    other = corrupt(images, name, 3, seed=8)
    if name in RANDOM:
        assert not np.array_equal(first, other)
    else:  # blur and contrast draw nothing
        np.testing.assert_array_equal(first, other)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_severity_grows_with_intensity(images, name, seed):
    changes = [float(np.abs(corrupt(images, name, level, seed) - images).mean())
               for level in corruptions.INTENSITIES]
    assert changes[0] > 0.0
    # Strictly, by a margin: a level that repeats the previous one fails.
    assert all(b > 1.1 * a for a, b in zip(changes, changes[1:])), changes


def test_gaussian_noise_has_the_tabulated_std():
    grey = np.full((200, 8, 8), 0.5)
    base = corrupt(grey, "gaussian_noise", 1, seed=0) - 0.5
    std = corruptions.NOISE_STD[0]
    # Clipping needs |noise| > 0.5 = 5 std at level 1: negligible. The
    # estimates' standard errors are std / sqrt(2 n) and std / sqrt(n).
    assert abs(base.std() - std) < 4.0 * std / math.sqrt(2 * base.size)
    assert abs(base.mean()) < 4.0 * std / math.sqrt(base.size)
    # One seed, one eps at every level: unclipped pixels scale with the std.
    for level, level_std in zip(corruptions.INTENSITIES, corruptions.NOISE_STD):
        noise = corrupt(grey, "gaussian_noise", level, seed=0) - 0.5
        inside = np.abs(noise) < 0.5 - 1e-6
        assert inside.mean() > 0.6
        np.testing.assert_allclose(noise[inside], base[inside] * level_std / std, atol=1e-6)


def test_contrast_keeps_each_image_mean(images):
    for level, factor in zip(corruptions.INTENSITIES, corruptions.CONTRAST_FACTOR):
        out = corrupt(images, "contrast", level)
        np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), images.mean(axis=(1, 2, 3)),
                                   atol=1e-6)
        np.testing.assert_allclose(out.std(axis=(1, 2, 3)), factor * images.std(axis=(1, 2, 3)),
                                   rtol=1e-5)


def test_blur_spreads_a_point_symmetrically_and_keeps_its_mass():
    point = np.zeros((1, 8, 8))
    point[0, 4, 4] = 1.0
    peaks = []
    for level in corruptions.INTENSITIES:
        out = corrupt(point, "gaussian_blur", level)[0].astype(np.float64)
        window = out[1:8, 1:8]  # centred on (4, 4): 3 pixels each way
        np.testing.assert_allclose(window, window[::-1], atol=1e-7)
        np.testing.assert_allclose(window, window.T, atol=1e-7)
        # The kernel, truncated at 3 std <= 3 px and normalised, stays inside
        # the frame around (4, 4): zero padding takes no mass away.
        assert out.sum() == pytest.approx(1.0, abs=1e-5)
        peaks.append(out[4, 4])
    assert all(b < a for a, b in zip(peaks, peaks[1:]))


def test_warp_is_exact_on_the_grid():
    x = np.random.default_rng(1).uniform(size=(2, 8, 8))
    # A quarter turn maps pixel centres onto pixel centres: no interpolation.
    turned = corruptions._affine(x, np.array([np.pi / 2, -np.pi / 2]), np.zeros((2, 2)))
    np.testing.assert_allclose(turned[0], np.rot90(x[0], -1), atol=1e-12)
    np.testing.assert_allclose(turned[1], np.rot90(x[1], 1), atol=1e-12)
    shifted = corruptions._affine(x, np.zeros(2), np.array([[0.0, 1.0], [-2.0, 0.0]]))
    np.testing.assert_allclose(shifted[0, :, 1:], x[0, :, :-1], atol=1e-12)
    np.testing.assert_array_equal(shifted[0, :, 0], 0.0)  # read from outside: background
    np.testing.assert_allclose(shifted[1, :-2], x[1, 2:], atol=1e-12)
    np.testing.assert_array_equal(shifted[1, -2:], 0.0)


def test_translation_moves_the_centre_of_mass_by_the_tabulated_shift(images):
    for level, pixels in zip(corruptions.INTENSITIES, corruptions.SHIFT_PIXELS):
        # A blob well inside the frame, so that nothing is pushed out of it.
        blob = np.zeros((50, 8, 8))
        blob[:, 3:5, 3:5] = 1.0
        out = corrupt(blob, "translation", level, seed=level).astype(np.float64)
        grid = np.arange(8.0)
        mass = out.sum(axis=(1, 2))
        rows = (out.sum(axis=2) * grid).sum(axis=1) / mass - 3.5
        cols = (out.sum(axis=1) * grid).sum(axis=1) / mass - 3.5
        np.testing.assert_allclose(np.hypot(rows, cols), pixels, atol=1e-6)


@pytest.mark.parametrize("intensity", [0, 6, -1, 2.0, 2.5, True, "3", None])
def test_intensity_must_be_an_int_in_1_to_5(images, intensity):
    with pytest.raises(ValueError, match=r"`intensity` must be an int in 1\.\.5"):
        corrupt(images, "rotation", intensity)


def test_numpy_int_intensity_is_accepted(images):
    np.testing.assert_array_equal(corrupt(images, "contrast", np.int64(2)),
                                  corrupt(images, "contrast", 2))


@pytest.mark.parametrize("name", ["fog", "Rotation", "", None, 3])
def test_unknown_name_lists_the_known_ones(images, name):
    with pytest.raises(ValueError, match=r"Unknown corruption.*'contrast'.*'translation'"):
        corrupt(images, name, 1)


@pytest.mark.parametrize("shape", [(8, 8), (4, 8, 8, 3), (4, 7, 8), (4, 8, 8, 1, 1), (4, 64)])
def test_bad_shape_is_rejected(shape):
    with pytest.raises(ValueError, match=r"`images` must have shape \[n, 8, 8, 1\]"):
        corrupt(np.zeros(shape), "gaussian_blur", 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_images_are_rejected(images, bad):
    broken = images.copy()
    broken[3, 2, 2, 0] = bad
    with pytest.raises(ValueError, match="image 3 holds NaN or inf"):
        corrupt(broken, "gaussian_noise", 1)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_bad_seed_is_rejected(images, seed):
    with pytest.raises(ValueError, match="`seed` must be a non-negative int"):
        corrupt(images, "translation", 1, seed=seed)
