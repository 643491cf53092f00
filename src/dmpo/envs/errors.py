"""The error type raised by `dmpo.envs`, and the argument check shared by its modules."""

from __future__ import annotations

import numpy as np


class EnvError(ValueError):
    """An environment name, argument, space or action is not usable by DMPO.

    The message names the offending name/argument and says what is supported instead.
    """


def check_positive_int(value, name: str) -> int:
    """`value` as an int if it is a positive integer (bools excluded), else EnvError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise EnvError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
