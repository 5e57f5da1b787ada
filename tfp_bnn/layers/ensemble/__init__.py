"""Cheap ensembles as layers: BatchEnsemble (Wen, Tran and Ba 2020) and Packed-Ensembles
(Laurent et al. 2023).

Both train M members in one network with `tfp_bnn.ensembles.MemberLoss` (outputs
[B, M, ...], member m at [:, m]) and predict through `tfp_bnn.predict` as the deep
ensembles of `tfp_bnn.ensembles` do: sample s is member s mod M, `num_samples` a multiple of
M, and `num_samples=M` the exact equal mixture of the members.

- BatchEnsemble: `EnsembleTile` -> `BatchEnsembleDense` / `BatchEnsembleConv2D` ... ->
  `EnsembleUntile`; one shared kernel per layer, per-member rank-1 fast weights.
- Packed-Ensembles: `PackedDense` / `PackedConv2D` (first=True, inner, last=True) ->
  `PackedOutput`; M narrow subnetworks in one grouped network.

The public names are also exported by `tfp_bnn.layers`.
"""

from tfp_bnn.layers.ensemble.batch_ensemble_conv2d import BatchEnsembleConv2D
from tfp_bnn.layers.ensemble.batch_ensemble_dense import BatchEnsembleDense
from tfp_bnn.layers.ensemble.ensemble_tile import EnsembleTile
from tfp_bnn.layers.ensemble.ensemble_untile import EnsembleUntile
from tfp_bnn.layers.ensemble.packed_conv2d import PackedConv2D
from tfp_bnn.layers.ensemble.packed_dense import PackedDense
from tfp_bnn.layers.ensemble.packed_output import PackedOutput

__all__ = [
    "BatchEnsembleConv2D",
    "BatchEnsembleDense",
    "EnsembleTile",
    "EnsembleUntile",
    "PackedConv2D",
    "PackedDense",
    "PackedOutput",
]
