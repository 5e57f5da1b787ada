"""Variational recurrent cells (LSTM and GRU) with reparameterization or Flipout
weight noise, for `keras.layers.RNN`.

The public names are exported by `tfp_bnn.layers`.
"""
