"""Gaussian-process output layers: SNGP's random-feature GP (Liu et al. 2020) with
spectral normalization, and the variational GP.

The public names are exported by `tfp_bnn.layers`.
"""
