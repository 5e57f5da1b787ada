"""The node posteriors: configuration objects, their names, their serialization."""

import keras
import pytest

from tfp_bnn.posteriors import FlowPosterior
from tfp_bnn.posteriors import NodeFlow
from tfp_bnn.posteriors import NodeGaussian
from tfp_bnn.posteriors.node import get_node_posterior

pytestmark = pytest.mark.jax  # configuration only: no backend computation


@pytest.mark.parametrize("posterior", [NodeGaussian(), NodeFlow(),
                                       NodeFlow(["planar", "radial"], 3), NodeFlow("sylvester", 0)])
def test_serialization_round_trips_in_safe_mode(posterior):
    serialized = keras.saving.serialize_keras_object(posterior)
    assert serialized["registered_name"] == f"tfp_bnn>{type(posterior).__name__}"
    restored = keras.saving.deserialize_keras_object(serialized, safe_mode=True)
    assert restored == posterior and type(restored) is type(posterior)


@pytest.mark.parametrize("identifier, expected", [
    (None, NodeGaussian()),
    ("gaussian", NodeGaussian()),
    ("flow", NodeFlow("planar", 2)),
    (NodeFlow("radial", 1), NodeFlow("radial", 1)),
    (FlowPosterior("radial", length=3), NodeFlow("radial", 3)),
    (keras.saving.serialize_keras_object(NodeFlow("planar", 4)), NodeFlow("planar", 4)),
])
def test_get_node_posterior_resolves_objects_names_and_dicts(identifier, expected):
    assert get_node_posterior(identifier) == expected


@pytest.mark.parametrize("make, message", [
    (lambda: get_node_posterior("laplace"), r"`posterior` must be one of.*'laplace'"),
    (lambda: get_node_posterior(3), r"`posterior`.*got 3"),
    (lambda: NodeFlow("spline"), r"`flows`"),
    (lambda: NodeFlow("planar", -1), r"`length`.*-1"),
])
def test_bad_values_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()
