"""Node-based BNNs (Trinh et al. 2022): deterministic weights, stochastic
multiplicative factors on the hidden units.

The public names are exported by `tfp_bnn.layers`.
"""
