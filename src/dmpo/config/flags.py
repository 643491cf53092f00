"""Config errors in terms of `dmpo train`'s flags: `DMPOConfig.batch_size` is `--agent.batch-size`.
Shared by the CLI and sweep specs, which both report a bad setting by its flag."""

from __future__ import annotations

import dataclasses
import functools
import re
import typing

from dmpo.config.agent import ConfigError
from dmpo.config.train import TrainConfig

__all__ = ["flag_message", "flag_of"]


@functools.cache
def _prefixes() -> dict[str, str]:
    """{dataclass name: its dotted path under TrainConfig} (`DMPOConfig` → `agent.`)."""
    found = {TrainConfig.__name__: ""}
    pending: list[tuple[type, str]] = [(TrainConfig, "")]
    while pending:
        cls, prefix = pending.pop()
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            kind = hints[field.name]
            if dataclasses.is_dataclass(kind) and isinstance(kind, type):
                found.setdefault(kind.__name__, f"{prefix}{field.name}.")
                pending.append((kind, f"{prefix}{field.name}."))
    return found


def flag_of(field: str) -> str | None:
    """`DMPOConfig.batch_size` → `--agent.batch-size` (None for a class outside TrainConfig)."""
    owner, _, name = field.partition(".")
    prefix = _prefixes().get(owner)
    return None if prefix is None or not name else "--" + f"{prefix}{name}".replace("_", "-")


def flag_message(error: ConfigError) -> str:
    """The error in terms of its flag: `--agent.batch-size must be a positive integer, got 0`."""
    flag = flag_of(error.field) if error.field else None
    if flag is None or error.expected is None:
        return str(error)
    owner = error.field.partition(".")[0]
    # Other fields named in the expectation (`<= max_replay_size (256)`) are named as flags too.
    expected = re.sub(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b(?:vmin|vmax)\b",
                      lambda match: flag_of(f"{owner}.{match.group(0)}") or match.group(0), error.expected)
    return f"{flag} must be {expected}, got {error.value!r}"
