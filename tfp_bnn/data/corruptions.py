"""Covariate-shift corruptions of 8x8 images at intensities 1 to 5.

In the style of CIFAR-10-C (Hendrycks and Dietterich 2019): each corruption
has five intensities, and a model is scored on the clean test set and on
every corruption x intensity; how fast accuracy, NLL and calibration decay
with intensity measures robustness to covariate shift (Ovadia et al. 2019).
CIFAR-10-C's parameters are made for 32x32 natural photographs; these are
re-chosen for the 8x8 digits of `tfp_bnn.data.load_digits` (pixels in
[0, 1], background 0, one digit pixel ~ 4 CIFAR pixels, and a digit only ~6
pixels tall, so a 1-pixel shift or a 30 degree turn is already severe).
Measured on the deterministic CNN of `zoo.models.digits` (60 epochs, seed
0, 97.5% clean accuracy): intensity 1 costs it 0.5-2.5 points of accuracy,
intensity 5 leaves it 55-89%, far below clean and far above chance (10%):

| corruption       | parameter                          |    1 |    2 |    3 |    4 |    5 |
|------------------|------------------------------------|-----:|-----:|-----:|-----:|-----:|
| `gaussian_noise` | noise std (pixel scale [0, 1])     | 0.10 | 0.20 | 0.30 | 0.40 | 0.50 |
| `gaussian_blur`  | kernel std (pixels)                | 0.40 | 0.55 | 0.70 | 0.85 | 1.00 |
| `rotation`       | angle (degrees, random sign)       |    6 |   12 |   18 |   24 |   30 |
| `contrast`       | contrast factor c                  | 0.75 | 0.60 | 0.50 | 0.40 | 0.30 |
| `translation`    | shift (pixels, random direction)   | 0.20 | 0.40 | 0.60 | 0.80 | 1.00 |

- gaussian_noise: x + std * eps, eps ~ N(0, 1) per pixel.
- gaussian_blur: separable Gaussian filter truncated at 3 std.
  Deterministic: the seed is not used.
- rotation: about the image centre, bilinear; the sign is drawn per image.
- contrast: m + c * (x - m), m the image's mean pixel (as CIFAR-10-C).
  Deterministic: the seed is not used.
- translation: sub-pixel shift, bilinear; the direction (an angle uniform
  in [0, 2 pi)) is drawn per image.

Pixels that a warp or filter reads from outside the image are 0, the
digits' background. Every result is clipped to [0, 1] and float32.

Randomness comes from `np.random.default_rng(seed)` alone, so a corruption
is a deterministic function of (images, intensity, seed); and one seed
gives the same noise, signs and directions at every intensity, only scaled
(common random numbers), so the change from the clean image grows with the
intensity and a severity curve is not blurred by fresh noise per level.

NumPy only, no scipy.ndimage: the two warps share one vectorised bilinear
sampler and the blur is a 1-D kernel applied twice, about 40 lines; that
keeps the module free of a dependency `setup.py` does not declare, and
corrupts a whole batch at once instead of looping over images in Python.

Example:
>>> x = tfp_bnn.data.load_digits()["x_test"]
>>> shifted = corrupt(x, "rotation", intensity=3, seed=0)
>>> shifted.shape, shifted.dtype
((359, 8, 8, 1), dtype('float32'))
"""

import math

import numpy as np

from tfp_bnn import _validation as check

INTENSITIES = (1, 2, 3, 4, 5)
IMAGE_SIZE = 8

# The table of the module docstring, index = intensity - 1.
NOISE_STD = (0.10, 0.20, 0.30, 0.40, 0.50)
BLUR_STD = (0.40, 0.55, 0.70, 0.85, 1.00)
ROTATION_DEGREES = (6.0, 12.0, 18.0, 24.0, 30.0)
CONTRAST_FACTOR = (0.75, 0.60, 0.50, 0.40, 0.30)
SHIFT_PIXELS = (0.20, 0.40, 0.60, 0.80, 1.00)


def _level(table, intensity):
    """The parameter of `table` (one per intensity) at `intensity`, checked."""
    return table[check.integer("intensity", intensity, maximum=len(INTENSITIES)) - 1]


def _check_images(images) -> np.ndarray:
    """float64 [n, 8, 8] view of images of shape [n, 8, 8, 1] or [n, 8, 8]."""
    array = np.asarray(images)
    shape = array.shape
    valid = (len(shape) == 3 or (len(shape) == 4 and shape[3] == 1)) and (
        shape[1:3] == (IMAGE_SIZE, IMAGE_SIZE)
    )
    if not valid:
        raise ValueError(
            f"`images` must have shape [n, {IMAGE_SIZE}, {IMAGE_SIZE}, 1] or "
            f"[n, {IMAGE_SIZE}, {IMAGE_SIZE}], got shape {shape}."
        )
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"`images` must be numeric, got dtype {array.dtype}.")
    array = array.astype(np.float64).reshape(shape[:3])
    if not np.all(np.isfinite(array)):
        index = int(np.flatnonzero(~np.isfinite(array).reshape(len(array), -1).all(axis=1))[0])
        raise ValueError(f"`images` must be finite; image {index} holds NaN or inf.")
    return array


def _finish(corrupted, images) -> np.ndarray:
    """Clipped float32 in the input's shape ([n, 8, 8, 1] or [n, 8, 8])."""
    return np.clip(corrupted, 0.0, 1.0).astype(np.float32).reshape(np.shape(images))


def _bilinear(images, rows, cols) -> np.ndarray:
    """images [n, H, W] sampled at float coordinates [n, H, W]; 0 outside."""
    num, height, width = images.shape
    row0 = np.floor(rows).astype(np.int64)
    col0 = np.floor(cols).astype(np.int64)
    row_frac, col_frac = rows - row0, cols - col0
    batch = np.arange(num)[:, None, None]
    out = np.zeros_like(rows)
    for d_row, w_row in ((0, 1.0 - row_frac), (1, row_frac)):
        for d_col, w_col in ((0, 1.0 - col_frac), (1, col_frac)):
            r, c = row0 + d_row, col0 + d_col
            inside = (r >= 0) & (r < height) & (c >= 0) & (c < width)
            values = images[batch, np.clip(r, 0, height - 1), np.clip(c, 0, width - 1)]
            out += np.where(inside, values, 0.0) * w_row * w_col
    return out


def _affine(images, angles, shifts) -> np.ndarray:
    """Rotates image i by angles[i] (radians) about its centre, then shifts it.

    Output pixel p reads the input at R(-angle) (p - centre - shift) + centre
    (inverse mapping, so every output pixel gets a value). With row 0 at the
    top, a positive angle turns the image clockwise; a shift (dr, dc) moves
    the content dr rows down and dc columns right.
    """
    _, height, width = images.shape
    grid_r, grid_c = np.meshgrid(np.arange(height, dtype=np.float64),
                                 np.arange(width, dtype=np.float64), indexing="ij")
    centre_r, centre_c = (height - 1) / 2.0, (width - 1) / 2.0
    cos = np.cos(angles)[:, None, None]
    sin = np.sin(angles)[:, None, None]
    dr = grid_r[None] - centre_r - shifts[:, 0, None, None]
    dc = grid_c[None] - centre_c - shifts[:, 1, None, None]
    rows = cos * dr - sin * dc + centre_r
    cols = sin * dr + cos * dc + centre_c
    return _bilinear(images, rows, cols)


def gaussian_noise(images, intensity: int, seed: int = 0) -> np.ndarray:
    """Adds N(0, std^2) noise per pixel, std = 0.1 * intensity; clips to [0, 1].

    Args:
        images: shape [n, 8, 8, 1] or [n, 8, 8], finite values (the digits
            of `load_digits` lie in [0, 1]).
        intensity: int in 1..5 (see the table in the module docstring).
        seed: non-negative int; the same seed gives the same noise, at every intensity only scaled.

    Returns:
        float32 images of the input's shape, clipped to [0, 1].

    Example:
    >>> images = np.zeros((2, 8, 8, 1), "float32")
    >>> images[:, 2:6, 3:5] = 1.0   # a bar, 4 pixels tall and 2 wide
    >>> noisy = gaussian_noise(images, intensity=2, seed=0)
    >>> noisy.shape, noisy.dtype, bool(noisy.min() >= 0.0 and noisy.max() <= 1.0)
    ((2, 8, 8, 1), dtype('float32'), True)
    """
    x = _check_images(images)
    std = _level(NOISE_STD, intensity)
    noise = np.random.default_rng(check.seed(seed)).standard_normal(x.shape)
    return _finish(x + std * noise, images)


def gaussian_blur(images, intensity: int, seed: int = 0) -> np.ndarray:
    """Gaussian filter with std 0.4-1.0 pixels (zero padding). The seed is unused.

    Args:
        images: shape [n, 8, 8, 1] or [n, 8, 8], finite values (the digits
            of `load_digits` lie in [0, 1]).
        intensity: int in 1..5 (see the table in the module docstring).
        seed: non-negative int (checked, not used: the blur is deterministic).

    Returns:
        float32 images of the input's shape, clipped to [0, 1].

    Example:
    >>> images = np.zeros((2, 8, 8, 1), "float32")
    >>> images[:, 2:6, 3:5] = 1.0   # a bar, 4 pixels tall and 2 wide
    >>> blurred = gaussian_blur(images, intensity=5)
    >>> float(blurred.max()) < 1.0, float(blurred[0, 4, 2, 0]) > 0.0   # spread sideways
    (True, True)
    """
    x = _check_images(images)
    check.seed(seed)
    std = _level(BLUR_STD, intensity)
    radius = int(math.ceil(3.0 * std))
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (offsets / std) ** 2)
    kernel /= kernel.sum()
    for axis in (1, 2):
        pad = [(0, 0)] * 3
        pad[axis] = (radius, radius)
        padded = np.pad(x, pad)
        size = x.shape[axis]
        x = sum(weight * np.take(padded, np.arange(k, k + size), axis=axis)
                for k, weight in enumerate(kernel))
    return _finish(x, images)


def rotation(images, intensity: int, seed: int = 0) -> np.ndarray:
    """Rotates each image by +-6 * intensity degrees (sign drawn per image).

    Args:
        images: shape [n, 8, 8, 1] or [n, 8, 8], finite values (the digits
            of `load_digits` lie in [0, 1]).
        intensity: int in 1..5 (see the table in the module docstring).
        seed: non-negative int; the same seed gives the same signs.

    Returns:
        float32 images of the input's shape, clipped to [0, 1].

    Example:
    >>> images = np.zeros((2, 8, 8, 1), "float32")
    >>> images[:, 2:6, 3:5] = 1.0   # a bar, 4 pixels tall and 2 wide
    >>> turned = rotation(images, intensity=5, seed=0)   # +-30 degrees
    >>> turned.shape, bool(np.any(turned != images))
    ((2, 8, 8, 1), True)
    """
    x = _check_images(images)
    degrees = _level(ROTATION_DEGREES, intensity)
    signs = np.random.default_rng(check.seed(seed)).choice([-1.0, 1.0], size=len(x))
    return _finish(_affine(x, np.deg2rad(degrees) * signs, np.zeros((len(x), 2))), images)


def contrast(images, intensity: int, seed: int = 0) -> np.ndarray:
    """m + c * (x - m), m = the image mean, c = 0.75 .. 0.3. The seed is unused.

    Args:
        images: shape [n, 8, 8, 1] or [n, 8, 8], finite values (the digits
            of `load_digits` lie in [0, 1]).
        intensity: int in 1..5 (see the table in the module docstring).
        seed: non-negative int (checked, not used: the contrast change is deterministic).

    Returns:
        float32 images of the input's shape, clipped to [0, 1].

    Example:
    >>> images = np.zeros((2, 8, 8, 1), "float32")
    >>> images[:, 2:6, 3:5] = 1.0   # a bar, 4 pixels tall and 2 wide
    >>> faded = contrast(images, intensity=3)   # c = 0.5, image mean m = 0.125
    >>> float(faded[0, 0, 0, 0]), float(faded[0, 3, 3, 0])   # m - c m, m + c (1 - m)
    (0.0625, 0.5625)
    """
    x = _check_images(images)
    check.seed(seed)
    factor = _level(CONTRAST_FACTOR, intensity)
    mean = x.mean(axis=(1, 2), keepdims=True)
    return _finish(mean + factor * (x - mean), images)


def translation(images, intensity: int, seed: int = 0) -> np.ndarray:
    """Shifts each image by 0.2 * intensity pixels in a direction drawn per image.

    Args:
        images: shape [n, 8, 8, 1] or [n, 8, 8], finite values (the digits
            of `load_digits` lie in [0, 1]).
        intensity: int in 1..5 (see the table in the module docstring).
        seed: non-negative int; the same seed gives the same directions.

    Returns:
        float32 images of the input's shape, clipped to [0, 1].

    Example:
    >>> images = np.zeros((2, 8, 8, 1), "float32")
    >>> images[:, 2:6, 3:5] = 1.0   # a bar, 4 pixels tall and 2 wide
    >>> shifted = translation(images, intensity=5, seed=0)   # 1 pixel
    >>> shifted.shape, bool(np.any(shifted != images))
    ((2, 8, 8, 1), True)
    """
    x = _check_images(images)
    pixels = _level(SHIFT_PIXELS, intensity)
    directions = np.random.default_rng(check.seed(seed)).uniform(0.0, 2.0 * np.pi, len(x))
    shifts = pixels * np.stack([np.sin(directions), np.cos(directions)], axis=1)
    return _finish(_affine(x, np.zeros(len(x)), shifts), images)


CORRUPTIONS = {
    "gaussian_noise": gaussian_noise,
    "gaussian_blur": gaussian_blur,
    "rotation": rotation,
    "contrast": contrast,
    "translation": translation,
}


def corrupt(images, name: str, intensity: int, seed: int = 0) -> np.ndarray:
    """Applies corruption `name` at `intensity` to a batch of 8x8 images.

    Args:
        images: shape [n, 8, 8, 1] or [n, 8, 8], finite values (the digits
            of `load_digits` lie in [0, 1]).
        name: a key of `CORRUPTIONS`.
        intensity: int in 1..5 (see the table in the module docstring).
        seed: non-negative int; the same seed gives the same result.

    Returns:
        float32 images of the input's shape, clipped to [0, 1].

    Raises:
        ValueError: for an unknown name (listing the known ones), an
            intensity outside 1..5, a bad shape or non-finite values.

    Example:
    >>> x_test = tfp_bnn.data.load_digits()["x_test"]
    >>> blurred = corrupt(x_test, "gaussian_blur", 5)
    >>> blurred.shape, blurred.dtype
    ((359, 8, 8, 1), dtype('float32'))
    """
    if not isinstance(name, str) or name not in CORRUPTIONS:
        raise ValueError(f"Unknown corruption {name!r}; available: {sorted(CORRUPTIONS)}.")
    return CORRUPTIONS[name](images, intensity, seed)
