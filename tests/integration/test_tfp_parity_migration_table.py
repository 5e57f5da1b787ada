"""Each row of README's "From tfp.layers to tfp_bnn" tables starts where TFP starts.

A row maps TFP code to tfp_bnn code; a port that trains from another
starting distribution is another model (a full-covariance posterior that
starts near a point mass instead of at sd 0.69 shrinks the predictive
spread). For every row that builds a distribution, both sides are built as
the row says, with the same shapes, and their initial distributions are
compared:

- deterministic starts (TFP's regression notebook's builders, keras.io's
  `VariableLayer` + `MultivariateNormalTriL` posterior, the fixed priors,
  the notebook's `RBFKernelFn`) to float tolerance: the same mean, standard
  deviation (and covariance, or GP predictive);
- random starts (the Dense and Convolution layers' default posteriors: loc and
  bias ~ N(0, 0.1^2), rho ~ N(-3, 0.1^2)) by the values drawn, TFP's and ours,
  against that distribution: |z| <= K = 4.5 for the mean and the variance with
  standard errors from the number of values, and a Kolmogorov-Smirnov test
  (p >= 1e-4) for the shape. Per layer there are 3 parameters x (2 z-checks
  + 1 KS) x 2 sides = 18 checks, 126 over the 7 layers: by Bonferroni a correct
  implementation fails with probability < 126 * 1e-4 = 1.3e-2 for a random
  seed; the seeds are fixed. Power: Keras' defaults (glorot_uniform kernel,
  zeros bias) give a kernel variance 2.9x and a bias variance 0 here,
  more than 10 standard errors away.
"""

import math
import pathlib

import pytest

# First: `tfp.layers` is built on tf_keras (see tests/integration/test_tfp_parity_dense.py).
tf_keras = pytest.importorskip("tf_keras")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402
from scipy import stats  # noqa: E402

from tests.integration import parity_checks  # noqa: E402
from tests.integration.tfp_builders import RBFKernelFn  # noqa: E402
from tests.integration.tfp_builders import keras_io_posterior  # noqa: E402
from tests.integration.tfp_builders import keras_io_prior  # noqa: E402
from tests.integration.tfp_builders import posterior_mean_field  # noqa: E402
from tests.integration.tfp_builders import prior_trainable  # noqa: E402
from tfp_bnn import kernels  # noqa: E402
from tfp_bnn import layers  # noqa: E402
from tfp_bnn import posteriors  # noqa: E402
from tfp_bnn import priors  # noqa: E402

tfd = tfp.distributions

pytestmark = [
    pytest.mark.filterwarnings("ignore:`layer.add_variable` is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:The initializer RandomNormal is unseeded:UserWarning"),
]

K = 4.5
MIN_P = 1e-4
TFP_EPS = float(np.finfo(np.float32).eps)  # default_loc_scale_fn's scale = eps + softplus(rho)


# -- the Dense and Convolution rows (random starts) ----------------------------------------

def _readme_initializers(seed):
    """The row's arguments: TFP's N(0, 0.1^2) means for kernel and bias."""
    return {"kernel_initializer": keras.initializers.RandomNormal(stddev=0.1, seed=seed),
            "bias_initializer": keras.initializers.RandomNormal(stddev=0.1, seed=seed + 1)}


# name: (TFP class, our class, constructor arguments, input shape)
RANDOM_ROWS = {
    "DenseFlipout": (tfp.layers.DenseFlipout, layers.DenseFlipout, (400,), (None, 40)),
    "DenseReparameterization": (tfp.layers.DenseReparameterization,
                                layers.DenseReparameterization, (400,), (None, 40)),
    "DenseLocalReparameterization": (tfp.layers.DenseLocalReparameterization,
                                     layers.DenseLocalReparameterization, (400,), (None, 40)),
    "Convolution1DFlipout": (tfp.layers.Convolution1DFlipout, layers.Conv1DFlipout,
                             (200, 5), (None, 16, 8)),
    "Convolution2DFlipout": (tfp.layers.Convolution2DFlipout, layers.Conv2DFlipout,
                             (200, 3), (None, 8, 8, 4)),
    "Convolution2DReparameterization": (tfp.layers.Convolution2DReparameterization,
                                        layers.Conv2DReparameterization,
                                        (200, 3), (None, 8, 8, 4)),
    "Convolution3DFlipout": (tfp.layers.Convolution3DFlipout, layers.Conv3DFlipout,
                             (200, 2), (None, 4, 4, 4, 4)),
}


def _check_normal(name, values, loc, scale):
    """values ~ N(loc, scale^2): mean and variance z-tests, and a KS test."""
    values = np.asarray(values, np.float64).ravel()
    n = values.size
    z_mean = (values.mean() - loc) / (scale / math.sqrt(n))
    z_var = (values.var(ddof=1) - scale**2) / (scale**2 * math.sqrt(2.0 / (n - 1)))
    assert abs(z_mean) <= K, (name, n, values.mean(), z_mean)
    assert abs(z_var) <= K, (name, n, values.std(ddof=1), z_var)
    p = stats.kstest(values, stats.norm(loc, scale).cdf).pvalue
    assert p >= MIN_P, (name, n, p)


def _start(layer, scale_shift):
    """(kernel loc, kernel rho, bias value) a built layer starts at."""
    posterior = layer.kernel_posterior
    rho = parity_checks.softplus_inverse(np.asarray(posterior.stddev(), np.float64) - scale_shift)
    return (np.asarray(posterior.mean()), rho, np.asarray(layer.bias_posterior.mean()))


@pytest.mark.parametrize("row", sorted(RANDOM_ROWS))
def test_variational_layer_rows_start_where_tfp_starts(row):
    theirs_class, ours_class, arguments, input_shape = RANDOM_ROWS[row]
    tf.random.set_seed(11)  # TFP's initializers are unseeded
    theirs = theirs_class(*arguments)
    theirs.build(input_shape)
    ours = ours_class(*arguments, seed=5, **_readme_initializers(7))
    ours.build(input_shape)
    for side, layer, shift in (("tfp", theirs, TFP_EPS), ("tfp_bnn", ours, 0.0)):
        loc, rho, bias = _start(layer, shift)
        _check_normal(f"{row} {side} kernel loc", loc, 0.0, 0.1)
        _check_normal(f"{row} {side} kernel rho", rho, -3.0, 0.1)
        _check_normal(f"{row} {side} bias", bias, 0.0, 0.1)
    # The bias is a point mass in both (TFP's is_singular=True).
    assert isinstance(theirs.bias_posterior.distribution, tfd.Deterministic)
    assert isinstance(ours.bias_posterior.distribution, tfd.Deterministic)


def test_keras_default_initializers_are_not_tfps_start():
    """Power of the check above: without the row's initializers the start differs."""
    ours = layers.DenseFlipout(400, seed=5)
    ours.build((None, 40))
    loc, _, bias = _start(ours, 0.0)
    with pytest.raises(AssertionError):
        _check_normal("glorot kernel", loc, 0.0, 0.1)
    assert np.all(bias == 0.0)


def test_default_multivariate_normal_fn_row_is_normal_prior():
    theirs = tfp.layers.DenseFlipout(3)
    theirs.build((None, 4))
    ours = layers.DenseFlipout(3, prior=priors.NormalPrior())
    ours.build((None, 4))
    for method in ("mean", "stddev"):
        np.testing.assert_array_equal(getattr(ours.kernel_prior, method)(),
                                      getattr(theirs.kernel_prior, method)())


# -- DenseVariational rows (deterministic starts) ------------------------------------------

INPUT_DIM, UNITS = 3, 2

# name: (TFP builders, our DenseVariational arguments), as the README rows write them.
DENSE_VARIATIONAL_ROWS = {
    "regression notebook": (
        (posterior_mean_field, prior_trainable),
        {"posterior": posteriors.MeanFieldNormal(rho_init=math.log(math.e - 1),
                                                 rho_init_stddev=0.0, scale_offset=1e-5),
         "prior": priors.TrainableNormalPrior(), "kernel_initializer": "zeros"}),
    "keras.io": (
        (keras_io_posterior, keras_io_prior),
        {"posterior": posteriors.FullCovarianceNormal(rho_init=0.0, rho_init_stddev=0.0,
                                                      scale_offset=1e-5),
         "prior": priors.NormalPrior(), "kernel_initializer": "zeros"}),
}


def _dense_variational_pair(row):
    builders, arguments = DENSE_VARIATIONAL_ROWS[row]
    theirs = tfp.layers.DenseVariational(UNITS, *builders)
    theirs.build((None, INPUT_DIM))
    ours = layers.DenseVariational(UNITS, seed=3, **arguments)
    ours.build((None, INPUT_DIM))
    x = tf.zeros([1, INPUT_DIM])
    return (ours.kernel_posterior, ours.kernel_prior), (theirs._posterior(x), theirs._prior(x))


@pytest.mark.parametrize("row", sorted(DENSE_VARIATIONAL_ROWS))
def test_dense_variational_rows_start_where_tfp_starts(row):
    ours, theirs = _dense_variational_pair(row)
    for which, q, p in zip(("posterior", "prior"), ours, theirs):
        assert q.event_shape == p.event_shape == [INPUT_DIM * UNITS + UNITS], which
        np.testing.assert_allclose(q.mean(), p.mean(), atol=1e-7, err_msg=which)
        np.testing.assert_allclose(q.stddev(), p.stddev(), rtol=1e-6, err_msg=which)
        # The density at random points: the correlations too.
        w = np.random.default_rng(0).normal(size=(5, INPUT_DIM * UNITS + UNITS))
        w = w.astype("float32")
        np.testing.assert_allclose(q.log_prob(w), p.log_prob(w), rtol=1e-5, err_msg=which)


def test_keras_io_posterior_starts_at_sd_0_69_not_a_point_mass():
    (posterior, _), _ = _dense_variational_pair("keras.io")
    np.testing.assert_allclose(posterior.stddev(), 1e-5 + math.log(2.0), rtol=1e-6)
    # What the README used to map it to starts 14x narrower.
    bare = layers.DenseVariational(UNITS, posterior=posteriors.FullCovarianceNormal(), seed=3)
    bare.build((None, INPUT_DIM))
    assert float(np.max(bare.kernel_posterior.stddev())) < 0.06


# -- the VariationalGaussianProcess row ----------------------------------------------------

def test_variational_gaussian_process_row_starts_where_the_notebook_starts():
    num_inducing = 8
    inducing = np.linspace(-10.0, 45.0, num_inducing)[:, None]  # the notebook's x range
    x = np.linspace(-15.0, 50.0, 7)[:, None]
    theirs = tfp.layers.VariationalGaussianProcess(
        num_inducing_points=num_inducing, kernel_provider=RBFKernelFn(dtype="float64"),
        event_shape=[1], inducing_index_points_initializer=tf.constant_initializer(inducing),
        unconstrained_observation_noise_variance_initializer=tf.constant_initializer(
            np.array(0.54)),
        convert_to_tensor_fn=tfd.Distribution.mean)
    reference = theirs(x)
    ours = layers.VariationalGaussianProcess(
        num_inducing, kernels.ExponentiatedQuadraticProvider(
            amplitude=math.log(2), length_scale=math.log(2), amplitude_multiplier=0.1,
            length_scale_multiplier=5.0),
        event_shape=1, inducing_index_points_initializer=keras.initializers.Constant(inducing),
        unconstrained_observation_noise_variance_initializer=0.54,
        convert_to_tensor_fn="mean", dtype="float64")
    value = ours(x)
    np.testing.assert_allclose(value, reference.mean(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(value.stddev(), reference.stddev(), rtol=1e-10)
    y = np.sin(x / 10.0)  # the joint density over the batch: the covariance too
    np.testing.assert_allclose(value.log_prob(y), reference.log_prob(y), rtol=1e-10)


# -- the README writes what is tested here -------------------------------------------------

README_MAPPINGS = [
    "`kernel_initializer=keras.initializers.RandomNormal(stddev=0.1)` and "
    "`bias_initializer=keras.initializers.RandomNormal(stddev=0.1)`",
    "`posterior=MeanFieldNormal(rho_init=math.log(math.e - 1), rho_init_stddev=0, "
    "scale_offset=1e-5)` with `kernel_initializer=\"zeros\"`",
    "`posterior=FullCovarianceNormal(rho_init=0.0, rho_init_stddev=0.0, scale_offset=1e-5)` "
    "with `kernel_initializer=\"zeros\"`",
    "`prior=TrainableNormalPrior()`",
    "is the default, `NormalPrior()`",
    "`ExponentiatedQuadraticProvider(amplitude=math.log(2), length_scale=math.log(2), "
    "amplitude_multiplier=0.1, length_scale_multiplier=5.0)`",
]


@pytest.mark.parametrize("mapping", README_MAPPINGS)
def test_readme_migration_tables_write_the_tested_mappings(mapping):
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    section = text[text.index("## From tfp.layers to tfp_bnn"):]
    assert mapping in section
