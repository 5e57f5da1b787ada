"""Keras 3 variational layers built on TensorFlow Probability."""

from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers.ensemble.batch_ensemble_conv2d import BatchEnsembleConv2D
from tfp_bnn.layers.ensemble.batch_ensemble_dense import BatchEnsembleDense
from tfp_bnn.layers.attention.bayesian_layer_normalization import BayesianLayerNormalization
from tfp_bnn.layers.attention.bayesian_multi_head_attention import BayesianMultiHeadAttention
from tfp_bnn.layers.attention.bayesian_transformer_block import BayesianTransformerBlock
from tfp_bnn.layers.distribution.categorical import Categorical
from tfp_bnn.layers.variational.conv1d_flipout import Conv1DFlipout
from tfp_bnn.layers.variational.conv1d_flipout import Convolution1DFlipout
from tfp_bnn.layers.variational.conv1d_reparameterization import Conv1DReparameterization
from tfp_bnn.layers.variational.conv1d_reparameterization import Convolution1DReparameterization
from tfp_bnn.layers.variational.conv2d_flipout import Conv2DFlipout
from tfp_bnn.layers.variational.conv2d_flipout import Convolution2DFlipout
from tfp_bnn.layers.variational.conv2d_reparameterization import Conv2DReparameterization
from tfp_bnn.layers.variational.conv2d_reparameterization import Convolution2DReparameterization
from tfp_bnn.layers.variational.conv3d_flipout import Conv3DFlipout
from tfp_bnn.layers.variational.conv3d_flipout import Convolution3DFlipout
from tfp_bnn.layers.variational.conv3d_reparameterization import Conv3DReparameterization
from tfp_bnn.layers.variational.conv3d_reparameterization import Convolution3DReparameterization
from tfp_bnn.layers.variational.dense_flipout import DenseFlipout
from tfp_bnn.layers.variational.dense_local_reparameterization import DenseLocalReparameterization
from tfp_bnn.layers.variational.dense_reparameterization import DenseReparameterization
from tfp_bnn.layers.variational.dense_variational import DenseVariational
from tfp_bnn.layers.distribution.distribution_lambda import DistributionLambda
from tfp_bnn.layers.variational.embedding_reparameterization import EmbeddingReparameterization
from tfp_bnn.layers.ensemble.ensemble_tile import EnsembleTile
from tfp_bnn.layers.ensemble.ensemble_untile import EnsembleUntile
from tfp_bnn.layers.recurrent.gru_cell_flipout import GRUCellFlipout
from tfp_bnn.layers.recurrent.gru_cell_reparameterization import GRUCellReparameterization
from tfp_bnn.layers.heads.heteroscedastic_classification import HeteroscedasticClassification
from tfp_bnn.layers.heads.heteroscedastic_regression import HeteroscedasticRegression
from tfp_bnn.layers.heads.homoscedastic_noise import HomoscedasticNoise
from tfp_bnn.layers.distribution.independent_bernoulli import IndependentBernoulli
from tfp_bnn.layers.distribution.independent_logistic import IndependentLogistic
from tfp_bnn.layers.distribution.independent_normal import IndependentNormal
from tfp_bnn.layers.distribution.independent_poisson import IndependentPoisson
from tfp_bnn.layers.distribution.kl_divergence import KLDivergenceAddLoss
from tfp_bnn.layers.distribution.kl_divergence import KLDivergenceRegularizer
from tfp_bnn.layers.recurrent.lstm_cell_flipout import LSTMCellFlipout
from tfp_bnn.layers.recurrent.lstm_cell_reparameterization import LSTMCellReparameterization
from tfp_bnn.layers.regularization.mc_dropout import MCDropout
from tfp_bnn.layers.distribution.mixture_logistic import MixtureLogistic
from tfp_bnn.layers.distribution.mixture_normal import MixtureNormal
from tfp_bnn.layers.distribution.mixture_same_family import MixtureSameFamily
from tfp_bnn.layers.distribution.multivariate_normal_tril import MultivariateNormalTriL
from tfp_bnn.layers.node.node_base import NodeLayer
from tfp_bnn.layers.node.node_conv2d import NodeConv2D
from tfp_bnn.layers.node.node_dense import NodeDense
from tfp_bnn.layers.distribution.one_hot_categorical import OneHotCategorical
from tfp_bnn.layers.ensemble.packed_conv2d import PackedConv2D
from tfp_bnn.layers.ensemble.packed_dense import PackedDense
from tfp_bnn.layers.ensemble.packed_output import PackedOutput
from tfp_bnn.layers.gaussian_process.random_feature_gaussian_process import RandomFeatureGaussianProcess
from tfp_bnn.layers.gaussian_process.random_feature_gaussian_process import mean_field_logits
from tfp_bnn.layers.gaussian_process.spectral_normalization import SpectralNormalization
from tfp_bnn.layers.heads.target_scaling import TargetScaling
from tfp_bnn.layers.gaussian_process.variational_gaussian_process import VariationalGaussianProcess

__all__ = [
    "BatchEnsembleConv2D",
    "BatchEnsembleDense",
    "BayesianLayer",
    "BayesianLayerNormalization",
    "BayesianMultiHeadAttention",
    "BayesianTransformerBlock",
    "Categorical",
    "Conv1DFlipout",
    "Conv1DReparameterization",
    "Conv2DFlipout",
    "Conv2DReparameterization",
    "Conv3DFlipout",
    "Conv3DReparameterization",
    "Convolution1DFlipout",
    "Convolution1DReparameterization",
    "Convolution2DFlipout",
    "Convolution2DReparameterization",
    "Convolution3DFlipout",
    "Convolution3DReparameterization",
    "DenseFlipout",
    "DenseLocalReparameterization",
    "DenseReparameterization",
    "DenseVariational",
    "DistributionLambda",
    "EmbeddingReparameterization",
    "EnsembleTile",
    "EnsembleUntile",
    "GRUCellFlipout",
    "GRUCellReparameterization",
    "HeteroscedasticClassification",
    "HeteroscedasticRegression",
    "HomoscedasticNoise",
    "IndependentBernoulli",
    "IndependentLogistic",
    "IndependentNormal",
    "IndependentPoisson",
    "KLDivergenceAddLoss",
    "KLDivergenceRegularizer",
    "LSTMCellFlipout",
    "LSTMCellReparameterization",
    "MCDropout",
    "MixtureLogistic",
    "MixtureNormal",
    "MixtureSameFamily",
    "MultivariateNormalTriL",
    "NodeConv2D",
    "NodeDense",
    "NodeLayer",
    "OneHotCategorical",
    "PackedConv2D",
    "PackedDense",
    "PackedOutput",
    "RandomFeatureGaussianProcess",
    "SpectralNormalization",
    "TargetScaling",
    "VariationalGaussianProcess",
    "mean_field_logits",
]
