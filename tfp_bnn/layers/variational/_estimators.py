"""The gradient estimators of the variational layers, each written once.

A variational layer computes `activation(x (*) w + b)` with w ~ q(w), where
(*) is the layer's matmul, convolution or embedding lookup
(`layer._apply_kernel`). How the randomness of w meets the inputs is the
estimator:

- `reparameterization_call`: one kernel sample w = mean + (w - mean) per
  call, shared by the batch (Blundell et al. 2015, "Weight Uncertainty in
  Neural Networks", sec. 3.2). Dense, Conv1D/2D/3D, Embedding and
  `BayesianLayerNormalization` use it.
- `flipout_call`: one perturbation delta = scale * eps per call, decorrelated
  per example by random signs (Wen et al. 2018, "Flipout", ICLR). Dense and
  Conv1D/2D/3D use it; they differ only in the shape of the signs.

The local reparameterization trick (Kingma et al. 2015) samples
pre-activations rather than weights, which only the Dense layer can do in
closed form; it stays a method of `DenseLocalReparameterization`.

Each function takes the layer, draws the posterior through its `_draw`,
adds kl_weight * KL with `_add_kl` at the very draws of the forward pass,
and finishes with bias and activation (`_finish`).
"""

from keras import ops

from tfp_bnn import noise


def reparameterization_call(layer, inputs, training):
    """y = x (*) w + b with one w ~ q shared by the batch (Blundell et al. 2015, sec. 3.2).

    w = mean + noise_scale * (w - mean): noise_scale is None in training
    (always sampled) and 0 or 1 at inference (mean mode or not).
    """
    noise_scale = layer._noise_scale(training)
    seeds = layer._call_seeds()
    draw = layer._draw(layer.kernel_params, seeds[0])
    mean = ops.cast(layer.posterior.mean(draw.prepared), layer.compute_dtype)
    kernel = mean + layer._scaled(draw.perturbation, noise_scale)
    bias, bias_draw = layer._bias_value(noise_scale, seeds[1])
    layer._add_kl(inputs, training, draw, bias_draw)
    return layer._finish(layer._apply_kernel(inputs, kernel), bias)


def signs_per_position(inputs, outputs):
    """Shapes of Flipout's input and output sign tensors: one sign per entry (Dense)."""
    return noise.shape_of(inputs), noise.shape_of(outputs)


def flipout_call(layer, inputs, training, sign_shapes=signs_per_position):
    """y = x (*) loc + ((x * s) (*) delta) * r, delta = scale * eps (Wen et al. 2018).

    `sign_shapes(inputs, outputs)` gives the shapes of the random sign
    tensors s and r: per position for Dense (`signs_per_position`), per
    example and channel for Conv (`ConvFlipout._flipout_sign_shapes`).
    """
    dtype = layer.compute_dtype
    noise_scale = layer._noise_scale(training)
    seeds = layer._call_seeds()
    draw = layer._draw(layer.kernel_params, seeds[0])
    loc, _ = layer.posterior.loc_scale(draw.prepared)
    outputs = layer._apply_kernel(inputs, ops.cast(loc, dtype))
    in_shape, out_shape = sign_shapes(inputs, outputs)
    sign_in = noise.signs(in_shape, dtype, seeds[2])
    sign_out = noise.signs(out_shape, dtype, seeds[3])
    perturbation = layer._apply_kernel(inputs * sign_in, draw.perturbation) * sign_out
    outputs = outputs + layer._scaled(perturbation, noise_scale)
    bias, bias_draw = layer._bias_value(noise_scale, seeds[1])
    layer._add_kl(inputs, training, draw, bias_draw)
    return layer._finish(outputs, bias)
