"""Packaging for tfp-bnn: Bayesian deep learning for Keras 3 on TensorFlow Probability.

The project's metadata (name, version, licence, description, README) is in
pyproject.toml; this file holds what each needs a comment: the dependencies
with the version ranges that were run, the extras, and the packaged data.
"""

from setuptools import find_packages, setup

# The documentation site (.ci/docs/mkdocs.yml; README, "Documentation"): MkDocs, the
# static-site builder whose hooks (.ci/docs/hooks.py) make every page (1.6: generated
# files); mkdocs-material, its theme, which ships its assets, so a page needs no
# network; mkdocstrings-python, which renders the API pages from the Google-style
# (Keras) docstrings through griffe's static analysis, so the build does not import
# TensorFlow (2.0.11, the version tested: it brings griffe 2, whose extension hooks
# .ci/docs/griffe_keras.py uses); mkdocs-jupyter, which renders colab/*.ipynb with the
# outputs stored in them (0.26: its `cache` option).
# Keras' JAX backend with TFP's JAX substrate (`KERAS_BACKEND=jax`). TFP 0.25's
# substrate imports private JAX modules that jax 0.7 removed
# (`jax.interpreters.xla.pytype_aval_mappings`), so jax stays in 0.6.x; 0.6.2 is the
# version run (with jaxlib 0.6.2 and Keras 3.15). `[cpu]` brings jaxlib; on an NVIDIA
# GPU install "jax[cuda12]==0.6.2" instead.
# jax 0.6 needs ml_dtypes >= 0.5, which TensorFlow 2.18 (the floor) refuses: the
# floors' run (.ci/compat) installs the test extra without JAX (TESTS_TENSORFLOW).
JAX = ["jax[cpu]>=0.6.2,<0.7"]

DOCS = ["mkdocs>=1.6", "mkdocs-material>=9", "mkdocstrings-python>=2.0.11",
        "mkdocs-jupyter>=0.26", "black>=24"]  # black: formats the API pages' signatures

# The test extra but JAX (see the comments of `extras_require` below).
# scipy (scikit-learn brings it too; named because tests import it): the independent
# references of the calibration, conformal and metrics tests (optimize, special, stats).
TESTS_TENSORFLOW = ["pytest", "pytest-xdist", "tf-keras", "scikit-learn", "scipy",
                    "nbclient", "nbformat", "ipykernel"] + DOCS

setup(
    # The repository's address, also in pyproject.toml's [project.urls]: colab/store_outputs.py
    # writes it into the notebooks' Colab badges and install cells, and .ci/docs/hooks.py
    # links repository files to it.
    url="https://github.com/tfp-bnn/tfp_bnn",
    packages=find_packages(include=["tfp_bnn", "tfp_bnn.*", "zoo", "zoo.*"]),
    package_data={"tfp_bnn.data": ["concrete/*.txt", "concrete/*.md",
                                   "uci_sets/*/*.txt", "uci_sets/*/*.md", "uci_sets/*.md",
                                   "sunspots/*.csv", "sunspots/*.md"]},
    include_package_data=True,
    install_requires=[
        # Every bound here is a version that .ci/compat (the floors) or the
        # main suite (the tops: TensorFlow 2.21, Keras 3.15, TFP 0.25) ran.
        # TensorFlow: 2.18 is the oldest the compat run passes on; capped
        # below the minor after the newest run (2.21), as the KL bookkeeping
        # matches TensorFlow's private loop-body graph classes by name
        # (tfp_bnn/layers/_kl_tracking.py).
        "tensorflow>=2.18,<2.22",
        # TFP's own TensorFlow extra: TFP 0.25 checks at import time that
        # tf-keras is installed, although tfp_bnn never imports tf_keras.
        # 0.25 is the only TFP run (the newest release): capped below the
        # next, which has not been run with tfp_bnn.
        "tensorflow-probability[tf]>=0.25,<0.26",
        # 3.10 is the first Keras that passes the compat run. Under 3.8 and
        # 3.9 the loss `fit` reports under MirroredStrategy exceeds one
        # device's (the KL counted once per replica), Keras' Softmax leaves
        # a fully masked attention row uniform rather than zero (the masks
        # are checked against Keras' MultiHeadAttention), and Keras'
        # CallContext has no `get_value` (the recurrent cells read the outer
        # call's `training` through it).
        # Below the next minor: tfp_bnn reaches into private Keras modules
        # (keras.src: the call context, autocast scope, mask accessors,
        # DropoutRNNCell, Functional, saving_lib) that a minor may change.
        "keras>=3.10,<3.16",
        "numpy",
        # The CLI writes PNG plots of every run (`python -m zoo train`);
        # matplotlib's Agg backend draws them without a display.
        "matplotlib",
    ],
    extras_require={
        # matplotlib is a core requirement (above): `plots` names it again only so
        # that install lines written with it (`pip install -e ".[plots]"`, the
        # Colab notebooks' install cells) keep working. It adds nothing.
        "plots": ["matplotlib"],
        # scikit-learn ships the 8x8 digits (no download) that the node-BNN
        # zoo models and the covariate-shift evaluation use.
        "digits": ["scikit-learn"],
        # tf_keras + tfp.layers are the reference the parity tests compare
        # with; scikit-learn for the digits (matplotlib, for the plot tests, is
        # a core requirement).
        # nbclient runs the colab/ tutorials in the tests, nbformat reads
        # them, ipykernel is the Python kernel they run in. pytest-xdist runs
        # the suite in two processes (pytest.ini): most tests are small
        # models bound by Python overhead, so two workers on two cores took
        # the suite from 22 to 14 minutes.
        # The docs packages too: tests/docs builds the site with --strict; and
        # JAX, for `KERAS_BACKEND=jax pytest` (CI runs both backends).
        "test": TESTS_TENSORFLOW + JAX,
        "jax": JAX,
        "docs": DOCS,
    },
)
