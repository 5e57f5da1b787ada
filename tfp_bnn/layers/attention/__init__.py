"""The Bayesian transformer's layers: variational multi-head attention, layer
normalization and the transformer block, trained by moment propagation.

The public names are exported by `tfp_bnn.layers`.
"""
