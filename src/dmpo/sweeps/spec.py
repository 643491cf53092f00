"""What a sweep runs: its grid points, seeds or search space, read from `dmpo sweep` flags.

    --grid agent.learner.num-samples=10,20          one `dmpo train` flag, its values (comma-separated;
                                                    a value of several words, e.g. layer sizes "64 64")
    --space agent.learner.mpo.epsilon=0.01:0.5:log  a range Optuna samples (`:log`: on a log scale;
                                                    two integers: an integer range, both ends included)

Every trial is a `dmpo train` run: the flags after `--`, then the grid point's (or the sampled) flags,
then `--seed S`. Each problem with a flag is a `SweepSpecError` of one line naming it, raised before
anything starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import math
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "GridPoint",
    "Range",
    "SweepSpec",
    "SweepSpecError",
    "parse_grid",
    "parse_space",
    "train_flag_names",
]

# Set by the sweep for every trial: a trial's own folder, seed and resumption are the sweep's to decide.
OWN_FLAGS = ("--seed", "--run-dir", "--resume", "--progress", "--no-progress")


class SweepSpecError(ValueError):
    """A bad `dmpo sweep` flag; its message is one line that names the flag."""


@dataclasses.dataclass(frozen=True)
class Range:
    """One `--space KEY=LOW:HIGH[:log]`."""

    key: str
    low: float
    high: float
    log: bool
    integer: bool

    def sampler(self):
        """The Ray Tune search domain of this range."""
        from ray import tune

        if self.integer:  # tune's integer ranges exclude their upper end; the flag includes it
            make = tune.lograndint if self.log else tune.randint
            return make(int(self.low), int(self.high) + 1)
        return (tune.loguniform if self.log else tune.uniform)(self.low, self.high)


@dataclasses.dataclass(frozen=True)
class GridPoint:
    """One combination of grid values: its folder name under the sweep folder and its `dmpo train` flags."""

    values: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        if not self.values:
            return "default"
        # A folder name: `key=value` per grid flag; characters a path cannot hold become `_`.
        return ",".join(f"{key}={re.sub(r'[^A-Za-z0-9._+-]', '_', value)}" for key, value in self.values)

    def flags(self) -> list[str]:
        return [token for key, value in self.values for token in (f"--{key}", *value.split())]


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep runs; `points()` and `trial_flags()` give its trials."""

    out: Path
    seeds: tuple[int, ...]
    grid: tuple[tuple[str, tuple[str, ...]], ...] = ()
    space: tuple[Range, ...] = ()
    search: str = "grid"
    trials: int = 0
    metric: str = "return"
    train_flags: tuple[str, ...] = ()

    def points(self) -> list[GridPoint]:
        keys = [key for key, _ in self.grid]
        combos = itertools.product(*(values for _, values in self.grid))
        return [GridPoint(tuple(zip(keys, combo, strict=True))) for combo in combos]

    def trial_flags(self, point_flags: Sequence[str], seed: int) -> list[str]:
        return [*self.train_flags, *point_flags, "--seed", str(seed)]


def train_flag_names() -> set[str]:
    """The `dmpo train` settings a grid or a space may name, as typed without `--` (`agent.batch-size`)."""
    import typing

    from dmpo.config import TrainConfig

    def walk(cls: type, prefix: str) -> set[str]:
        hints = typing.get_type_hints(cls)
        names = set()
        for field in dataclasses.fields(cls):
            name = prefix + field.name.replace("_", "-")
            kind = hints.get(field.name)
            if isinstance(kind, type) and dataclasses.is_dataclass(kind):
                names |= walk(kind, name + ".")
            else:
                names.add(name)
        return names

    return walk(TrainConfig, "")


def _split_key(flag: str, item: str, example: str) -> tuple[str, str]:
    key, sep, rest = item.partition("=")
    key = key.strip().removeprefix("--")
    if not sep or not key or not rest.strip():
        raise SweepSpecError(f"{flag} {item!r}: expected KEY={example}")
    if key not in train_flag_names():
        raise SweepSpecError(f"{flag} {item!r}: `dmpo train` has no flag --{key} (see `dmpo train --help`)")
    if f"--{key}" in OWN_FLAGS:
        raise SweepSpecError(f"{flag} {item!r}: the sweep sets --{key} itself; use --seeds for seeds")
    return key, rest


def parse_grid(items: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    grid, seen = [], set()
    for item in items:
        key, rest = _split_key("--grid", item, "V1,V2,...")
        values = tuple(v.strip() for v in rest.split(","))
        if any(not v for v in values) or len(set(values)) != len(values):
            raise SweepSpecError(f"--grid {item!r}: values must be distinct and non-empty, e.g. {key}=1,2")
        if key in seen:
            raise SweepSpecError(f"--grid {item!r}: {key} is already in another --grid")
        seen.add(key)
        grid.append((key, values))
    return tuple(grid)


def _number(text: str, flag: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SweepSpecError(
            f"{flag} {item!r}: {text!r} is not a number; expected KEY=LOW:HIGH[:log]"
        ) from None
    if not math.isfinite(value):
        raise SweepSpecError(f"{flag} {item!r}: {text!r} is not a finite number")
    return value


def parse_space(items: Sequence[str]) -> tuple[Range, ...]:
    ranges, seen = [], set()
    for item in items:
        key, rest = _split_key("--space", item, "LOW:HIGH[:log]")
        parts = rest.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
            raise SweepSpecError(f"--space {item!r}: expected KEY=LOW:HIGH or KEY=LOW:HIGH:log")
        low, high = (_number(p, "--space", item) for p in parts[:2])
        log = len(parts) == 3
        if not low < high:
            raise SweepSpecError(f"--space {item!r}: LOW must be below HIGH, got {parts[0]}:{parts[1]}")
        if log and low <= 0:
            raise SweepSpecError(f"--space {item!r}: a log range needs LOW > 0, got {parts[0]}")
        if key in seen:
            raise SweepSpecError(f"--space {item!r}: {key} is already in another --space")
        seen.add(key)
        integer = all(re.fullmatch(r"[+-]?\d+", p) for p in parts[:2])
        ranges.append(Range(key, low, high, log, integer))
    return tuple(ranges)


def check_train_flags(flags: Sequence[str], what: str):
    """The TrainConfig `dmpo train FLAGS` would run; a refusal is a SweepSpecError naming `what` and why."""
    import tyro

    from dmpo.config import AGENT_PRESETS, ConfigError, ParsedConfigError, TrainConfig, parsing_flags
    from dmpo.config.flags import flag_message

    flags, preset = list(flags), "fast"
    for at, flag in enumerate(flags):  # `--preset NAME` picks the agent the other flags apply to
        if flag == "--preset" and at + 1 < len(flags):
            preset = flags[at + 1]
            del flags[at : at + 2]
            break
    if preset not in AGENT_PRESETS:
        raise SweepSpecError(f"{what}: --preset {preset!r} is not one of {list(AGENT_PRESETS)}")
    refused = io.StringIO()
    try:
        with parsing_flags(), contextlib.redirect_stderr(refused), contextlib.redirect_stdout(refused):
            return tyro.cli(
                TrainConfig, args=flags, default=TrainConfig(agent=AGENT_PRESETS[preset]()), prog="dmpo train"
            )
    except ParsedConfigError as error:
        raise SweepSpecError(f"{what}: {flag_message(error.error)}") from None
    except ConfigError as error:
        raise SweepSpecError(f"{what}: {error}") from None
    except SystemExit:
        # tyro printed a framed panel; its lines that say what went wrong, without the frame
        lines = [re.sub(r"^[\s│╭╰─┃]+|[\s│╮╯─┃]+$", "", line) for line in refused.getvalue().splitlines()]
        kept = []
        for line in lines[1:]:  # the first line is the panel's title
            if line.startswith(("Argument helptext", "For full helptext", "usage")):
                break
            if line and not re.fullmatch(r"-+", line):
                kept.append(line)
        reason = " ".join(kept) or "see `dmpo train --help`"
        raise SweepSpecError(f"{what}: `dmpo train` refuses these flags: {reason[:300]}") from None
