"""Full-mode memory estimate and the check before allocation."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import check_full_covariance
from tfp_bnn.moments import full_covariance_bytes
from tfp_bnn.moments import full_covariance_sizes
from tfp_bnn.moments import transformer_block
from tfp_bnn.testing.moments_reference import random_block_params


def test_sizes_by_hand():
    # B=2, J=4, I=8, H=2, K=4, Dv=3, F=16: activations (4*16)^2 * 2, dense
    # halves 16 * 8*16 * 2, scores 2*2*256, score halves 2*2*64*4, value
    # halves 2*2*max(64*3, 144); all times 4 bytes.
    sizes = full_covariance_sizes(2, 4, 8, 2, 4, 3, 16)
    assert sizes == {
        "activation covariance": 4 * 2 * 64**2,
        "dense half product": 4 * 2 * 16 * 128,
        "score covariance": 4 * 2 * 2 * 256,
        "score half product": 4 * 2 * 2 * 64 * 4,
        "value half product": 4 * 2 * 2 * 192,
    }
    assert full_covariance_bytes(2, 4, 8, 2, 4, 3, 16) == 4 * 2 * 64**2
    # Long sequences: the per-head score covariance J^4 dominates.
    sizes = full_covariance_sizes(1, 512, 8, 8, 1, 1, 8)
    assert max(sizes, key=sizes.get) == "score covariance"


def test_estimate_bounds_the_real_tensors():
    """The activation estimate is the size of the block's output covariance."""
    params = random_block_params(0, 8, 2, 4, 16)
    out = transformer_block(tf.ones([2, 4, 8]), params, 2, 4, mode="full")
    assert out.cov.shape.num_elements() * 4 <= full_covariance_bytes(2, 4, 8, 2, 4, 4, 16)


def test_check_raises_for_a_large_request_without_allocating():
    with pytest.raises(ValueError) as error:
        check_full_covariance(64, 512, 512, 8, 64, 64, 2048, max_bytes=2**31)
    message = str(error.value)
    for part in ("batch=64", "seq_len=512", "width=512", "ff_dim=2048", "`max_bytes`=2,147,483,648",
                 'mode="diagonal"'):
        assert part in message
    assert check_full_covariance(2, 4, 8, 2, 4, 4, 16, max_bytes=2**31) == 4 * 2 * 64**2
    with pytest.raises(ValueError, match="`seq_len` must be a positive int"):
        check_full_covariance(2, 0, 8, 2, 4, 4, 16, max_bytes=2**31)
    with pytest.raises(ValueError, match="`max_bytes` must be a finite number > 0"):
        check_full_covariance(2, 4, 8, 2, 4, 4, 16, max_bytes=0)


def test_transformer_block_checks_before_allocating():
    # The largest real request: B=64, J=512, I=512 (the 64 MB input is the
    # only allocation; full mode would need ~1.8e13 bytes per covariance).
    width, heads, key_dim, ff_dim = 512, 8, 64, 2048
    params = {key: (tf.zeros(shape), None, None, None) for key, shape in (
        ("query", [width, heads * key_dim]), ("key", [width, heads * key_dim]),
        ("value", [width, heads * key_dim]), ("output", [heads * key_dim, width]),
        ("ffn1", [width, ff_dim]), ("ffn2", [ff_dim, width]), ("norm1", [width]),
        ("norm2", [width]))}
    x = tf.zeros([64, 512, width])
    with pytest.raises(ValueError, match=r"over `max_bytes`=2,147,483,648"):
        transformer_block(x, params, heads, key_dim, mode="full")
    # The same shapes are fine in diagonal mode (not run here: that is the
    # point of the check), and a tiny budget stops even a tiny block.
    small = random_block_params(0, 8, 2, 4, 16)
    with pytest.raises(ValueError, match=r"`max_bytes`=1,000"):
        transformer_block(np.ones([2, 4, 8], np.float32), small, 2, 4, mode="full",
                          max_bytes=1000)
