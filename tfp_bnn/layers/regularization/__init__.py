"""Monte Carlo dropout (Gal & Ghahramani 2016): dropout that stays on at prediction.

The public names are exported by `tfp_bnn.layers`.
"""
