"""What the models' `from_config` share."""

import keras


def with_dtype_policy(config):
    """A copy of a model's `get_config()` whose `dtype` is a policy again.

    `get_config` writes the dtype policy serialized (a dict); the
    constructor takes the policy itself.
    """
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config
