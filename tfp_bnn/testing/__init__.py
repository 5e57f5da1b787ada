"""Shared test helpers for layers built on tfp_bnn."""

from tfp_bnn.testing.layer_test import run_bayesian_layer_test

__all__ = ["run_bayesian_layer_test"]
