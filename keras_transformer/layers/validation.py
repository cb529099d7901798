"""Argument checks whose errors name the argument and the value received."""

import numbers

import numpy as np


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    return int(value)


def check_non_negative_int(name, value):
    """A Python int >= 0 (bools refused), e.g. a count where 0 means none."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer; received {name}={value!r}.")
    return value


def check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a float in [0, 1); received {name}={value!r}.")
    return float(value)


def check_non_negative(name, value):
    """A finite real number >= 0 (e.g. a Beta distribution's alpha, 0 for none)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
        0 <= value < float("inf")
    ):
        raise ValueError(
            f"`{name}` must be a finite number >= 0; received {name}={value!r}."
        )
    return float(value)


def check_bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False; received {name}={value!r}.")
    return value


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}; received {name}={value!r}."
        )
    return value


def check_divisible(name, value, divisor_name, divisor):
    if value % divisor != 0:
        raise ValueError(
            f"`{name}` must be divisible by `{divisor_name}`; received "
            f"{name}={value}, {divisor_name}={divisor}."
        )


def check_token_ids(name, value):
    """Token ids given as host data (numpy, lists) must be integers.

    A functional model silently casts float ids to its int32 inputs (2.7 -> 2),
    hiding a data bug.  Tensors are not checked: Keras' distributed `fit`
    builds the model from the float MEAN over replicas of a batch of ids.
    """
    if isinstance(value, (np.ndarray, list, tuple)):
        dtype = np.asarray(value).dtype
        if not np.issubdtype(dtype, np.integer):
            raise ValueError(
                f"`{name}` must be an integer array of token ids; received "
                f"{name} with dtype={dtype}."
            )
