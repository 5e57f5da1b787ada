"""Distribution-valued outputs, TFP's `tfp.layers` idiom in Keras 3: a layer returns
a TFP distribution; plus the KL layers that put a distribution's divergence into the loss.

The public names are exported by `tfp_bnn.layers`.
"""
