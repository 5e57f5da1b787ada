"""Ready models, their registry, and the command line (`python -m zoo`).

Every entry of `MODELS` is a function that returns a compiled Keras model.

Example:
>>> import zoo
>>> zoo.list_models()
['bbb_mlp']
>>> model = zoo.get_model("bbb_mlp")(8, num_train=927)
"""

from zoo.bbb_mlp import bbb_mlp

MODELS = {
    "bbb_mlp": bbb_mlp,
}


def list_models():
    """Names of the registered models, sorted."""
    return sorted(MODELS)


def get_model(name):
    """The builder function registered under `name`.

    Args:
        name: a name from `list_models()`.

    Returns:
        The function that builds and compiles the model.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in MODELS:
        raise ValueError(f"Unknown model {name!r}; available: {list_models()}.")
    return MODELS[name]


__all__ = ["MODELS", "bbb_mlp", "get_model", "list_models"]
