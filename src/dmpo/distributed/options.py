"""Settings and results of the distributed program (everything but the agent's own config)."""

from __future__ import annotations

import dataclasses
from typing import Any


class NodeFailure(RuntimeError):
    """A node the program cannot run without (learner, replay, counter) failed; the program stopped."""


@dataclasses.dataclass(frozen=True)
class ProgramOptions:
    """How the program is laid out and watched (everything but the agent's own config)."""

    num_actors: int = 1
    max_actor_steps: int | None = None
    """Stop once the actors have taken this many environment steps in all."""
    max_learner_steps: int | None = None
    """Stop once the learner's step count (across resumes) reaches this."""
    variable_update_period: int = 1000
    """Actor steps between (asynchronous) fetches of the learner's target policy."""
    variable_publish_seconds: float = 0.0
    """Seconds one published copy of the variables serves all requests (0: always the newest)."""
    evaluator_episodes: int = 1
    """Episodes per evaluation round."""
    evaluator_period_seconds: float | None = 10.0
    """Minimum seconds between the starts of evaluation rounds; None runs no evaluator."""
    checkpoint_period_seconds: float = 600.0
    """Seconds between learner checkpoints (one more is written when the program stops)."""
    keep_checkpoints: int = 2
    checkpoint_replay: bool = False
    """Store the replay contents in checkpoints and restore them on resume."""
    insert_batch_size: int = 32
    """Items an actor gathers before one remote insert."""
    max_inserts_in_flight: int = 2
    """Remote inserts an actor may have outstanding before its environment loop waits."""
    samples_in_flight: int = 2
    """Remote sample calls the learner's prefetch thread keeps outstanding."""
    max_actor_restarts: int = 10
    """Replacements of dead actors (in all) before the program gives up."""
    poll_seconds: float = 1.0
    startup_timeout_seconds: float = 600.0
    """A critical node that has not answered its first health check within this is declared dead."""
    health_timeout_seconds: float = 120.0
    """A critical node that stops answering health checks for this long is declared dead."""
    stop_timeout_seconds: float = 60.0
    log_time_delta: float = 10.0
    """Seconds between rows of the actor and learner loggers (spec §7.2)."""

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, expected: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")

        def positive_int(name: str, allow_none: bool = False) -> None:
            value = getattr(self, name)
            ok = (value is None and allow_none) or (isinstance(value, int) and not isinstance(value, bool)
                                                    and value > 0)
            check(ok, name, "a positive integer" + (" or None" if allow_none else ""))

        for name in ("num_actors", "variable_update_period", "evaluator_episodes", "keep_checkpoints",
                     "insert_batch_size", "max_inserts_in_flight", "samples_in_flight"):
            positive_int(name)
        positive_int("max_actor_steps", allow_none=True)
        positive_int("max_learner_steps", allow_none=True)
        check(isinstance(self.max_actor_restarts, int) and self.max_actor_restarts >= 0, "max_actor_restarts",
              "an integer >= 0")
        if self.evaluator_period_seconds is not None:
            check(self.evaluator_period_seconds >= 0, "evaluator_period_seconds", ">= 0 or None")
        check(self.variable_publish_seconds >= 0, "variable_publish_seconds", ">= 0 seconds")
        for name in ("checkpoint_period_seconds", "poll_seconds", "startup_timeout_seconds",
                     "health_timeout_seconds", "stop_timeout_seconds"):
            check(getattr(self, name) > 0, name, "> 0 seconds")
        check(self.log_time_delta >= 0, "log_time_delta", ">= 0 seconds")


@dataclasses.dataclass(frozen=True)
class DistributedResult:
    """What a finished (or interrupted) program reports."""

    status: str
    """'finished' (a step limit was reached) or 'interrupted' (stopped from outside)."""
    counts: dict[str, Any]
    """The shared counter's totals after every node pushed its last counts."""
    learner: dict[str, Any]
    """The learner node's stats: steps, resumed_from, data_wait_fraction, ..."""
    actors: list[dict[str, Any]]
    """Per actor node that ended normally: its own steps and episodes, fetch and insert stats."""
    actor_restarts: int
    evaluator_returns: list[tuple[int, float]]
    """(learner step of the weights used, episode return) per evaluation episode."""
    replay: Any
    """Final `TableStats` of the replay table (None if unavailable)."""
    replay_history: list[tuple[float, Any]]
    """(seconds since start, `TableStats`) per monitoring pass."""
    wall_seconds: float
    run_dir: str
    resumed_from: int | None
