"""The N-d convolution base shared by Conv1D/2D/3D: TFP's class names, causal padding."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import layers


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("kind", ["Flipout", "Reparameterization"])
def test_tfp_names_are_aliases(rank, kind):
    ours = getattr(layers, f"Conv{rank}D{kind}")
    assert getattr(layers, f"Convolution{rank}D{kind}") is ours
    assert ours.rank == rank
    assert keras.saving.get_registered_name(ours) == f"tfp_bnn>Conv{rank}D{kind}"
    assert f"Convolution{rank}D{kind}" in layers.__all__


@pytest.mark.jax
def test_causal_padding_is_conv1d_only_and_pads_the_past():
    x = np.random.default_rng(0).normal(size=(1, 6, 2)).astype("float32")
    layer = layers.Conv1DReparameterization(1, 3, padding="causal", dilation_rate=2,
                                            kl_weight=0.1, seed=0)
    tfp_bnn.set_mean_mode(layer, True)
    before = keras.ops.convert_to_numpy(layer(x))
    # Output t depends on inputs up to t only: change the last step alone.
    changed = x.copy()
    changed[0, -1] += 5.0
    after = keras.ops.convert_to_numpy(layer(changed))
    assert before.shape == (1, 6, 1)
    np.testing.assert_array_equal(before[0, :-1], after[0, :-1])
    assert not np.allclose(before[0, -1], after[0, -1])
    with pytest.raises(ValueError, match=r"`padding`.*'causal'"):
        layers.Conv2DFlipout(2, 3, padding="causal")
