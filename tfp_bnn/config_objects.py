"""The small serializable configuration objects tfp_bnn is built from.

Priors, posteriors and KL schedules are plain objects described entirely by
their constructor arguments. `ConfigObject` gives them Keras serialization
(`get_config` / `from_config`), equality by configuration and a readable
repr; `resolve` turns what a user passes (instance, name, dict) into one.
"""

import keras


class ConfigObject:
    """Base of objects whose state is their constructor arguments."""

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self):
        # repr: a config may hold dicts and lists (serialized Keras objects).
        return hash((type(self).__name__, repr(sorted(self.get_config().items()))))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def resolve(identifier, base, names, argument, default=None):
    """Resolves `identifier` to an instance of `base`.

    Args:
        identifier: an instance of `base`, a key of `names` (the class is
            built with default arguments), a serialized dict, or None for
            `default()`.
        base: the expected class.
        names: dict from names to classes.
        argument: the argument's name, used in the error message.
        default: class to instantiate for None (None: None is an error).

    Raises:
        ValueError naming `argument` and the value when it cannot resolve.
    """
    if identifier is None and default is not None:
        return default()
    if isinstance(identifier, base):
        return identifier
    if isinstance(identifier, str):
        if identifier in names:
            return names[identifier]()
        raise ValueError(
            f"Unknown `{argument}` {identifier!r}; expected one of {sorted(names)} "
            f"or a {base.__module__}.{base.__name__} instance."
        )
    if isinstance(identifier, dict):
        obj = keras.saving.deserialize_keras_object(identifier)
        if isinstance(obj, base):
            return obj
    raise ValueError(
        f"`{argument}` must be a {base.__module__}.{base.__name__}, one of "
        f"{sorted(names)}{' or None' if default else ''}, got {identifier!r}."
    )
