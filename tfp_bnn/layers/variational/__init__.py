"""Variational layers: Bayes by Backprop (Blundell et al. 2015) with the
reparameterization, Flipout and local reparameterization estimators, in Dense,
convolutional, DenseVariational and Embedding form, and `BayesianLayer`, their base.

The public names are exported by `tfp_bnn.layers`.
"""
