"""Output heads that model the noise: heteroscedastic regression and
classification (Kendall & Gal 2017), homoscedastic noise, and the layer that maps
standardised outputs back to the target's units.

The public names are exported by `tfp_bnn.layers`.
"""
