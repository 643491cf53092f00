"""Settings and results of the distributed program (everything but the agent's own config)."""

from __future__ import annotations

import dataclasses
from typing import Any

from dmpo.config import ConfigError


class NodeFailure(RuntimeError):
    """A node the program cannot run without (learner, replay, counter) failed; the program stopped.

    `node` names that node ("learner", "replay", "counter"; None when acting nodes failed too often)
    and `error` is what the driver saw of it (Ray's error, or the node's own exception)."""

    def __init__(self, message: str, node: str | None = None, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.node, self.error = node, error


@dataclasses.dataclass(frozen=True)
class ProgramOptions:
    """How the program is laid out and watched: knobs with no single-process meaning.

    What the run does — task, steps, seed, actors, evaluation and checkpoint periods (environment
    steps), kept checkpoints, replay in checkpoints — is the `TrainConfig`, and means the same as in
    one process. The wall-clock periods below are extra, explicit options (off by default).
    """

    max_learner_steps: int | None = None
    """Also stop once the learner's step count (across resumes) reaches this."""
    variable_update_period: int = 1000
    """Actor steps between (asynchronous) fetches of the learner's target policy."""
    variable_publish_seconds: float = 0.0
    """Seconds one published copy of the variables serves all requests (0: always the newest)."""
    evaluator_period_seconds: float | None = None
    """Also start an evaluation round this many seconds after the previous one began (None: off)."""
    checkpoint_period_seconds: float | None = None
    """Also checkpoint this many seconds after the previous checkpoint (None: off)."""
    insert_batch_size: int = 32
    """Items an actor gathers before one remote insert."""
    max_inserts_in_flight: int = 2
    """Remote inserts an actor may have outstanding before its environment loop waits."""
    samples_in_flight: int = 2
    """Remote sample calls the learner's prefetch threads keep outstanding."""
    max_actor_restarts: int = 10
    """Replacements of dead actors (in all) before the program gives up."""
    max_node_restarts: int = 3
    """Recoveries (in all) of a lost learner, replay node or counter, each from the newest checkpoint,
    before the run ends `failed` (0: the first such loss ends it)."""
    node_restart_deadline_seconds: float = 600.0
    """How long a recovery waits for the cluster to hold the program again (a lost machine's
    replacement to join); past it the run ends `interrupted` at its newest checkpoint."""
    poll_seconds: float = 1.0
    startup_timeout_seconds: float = 600.0
    """A critical node that has not answered its first health check within this is declared dead."""
    health_timeout_seconds: float = 120.0
    """A critical node that stops answering health checks for this long is declared dead."""
    stop_timeout_seconds: float = 20.0
    """How long a stop waits, in all, for the learner's final checkpoint, the actors and the evaluator
    (they stop in parallel): below the grace period of a scheduler (SLURM: 30 s) or systemd (90 s)."""
    final_evaluation_timeout_seconds: float = 300.0
    """How long a run that finished its budget then waits for the evaluation rounds it has sent (the
    final one included), from when the learner's final checkpoint is in: such a stop has no scheduler's
    grace period to fit, and its last evaluation is part of its result. A stop by a signal or a callback
    keeps to `stop_timeout_seconds`."""
    log_time_delta: float = 10.0
    """Seconds between rows of the actor and learner loggers (algorithm.md §7.2)."""
    actor_resources: dict[str, float] | None = None
    """Ray resources each actor and the evaluator ask for (e.g. {"cpu_node": 1}, a custom resource of
    the nodes that should act); None: none, Ray places them anywhere."""
    learner_resources: dict[str, float] | None = None
    """Ray resources the learner asks for, besides the GPU it takes when the cluster has one."""
    replay_resources: dict[str, float] | None = None
    """Ray resources the replay node asks for."""

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, expected: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")

        def positive_int(name: str, allow_none: bool = False) -> None:
            value = getattr(self, name)
            ok = (value is None and allow_none) or (isinstance(value, int) and not isinstance(value, bool)
                                                    and value > 0)
            check(ok, name, "a positive integer" + (" or None" if allow_none else ""))

        for name in ("variable_update_period", "insert_batch_size", "max_inserts_in_flight",
                     "samples_in_flight"):
            positive_int(name)
        positive_int("max_learner_steps", allow_none=True)
        for name in ("max_actor_restarts", "max_node_restarts"):
            value = getattr(self, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            check(whole and value >= 0, name, "an integer >= 0")
        for name in ("evaluator_period_seconds", "checkpoint_period_seconds"):
            value = getattr(self, name)
            check(value is None or value >= 0, name, ">= 0 seconds or None")
        check(self.variable_publish_seconds >= 0, "variable_publish_seconds", ">= 0 seconds")
        check(self.node_restart_deadline_seconds >= 0, "node_restart_deadline_seconds", ">= 0 seconds")
        for name in ("poll_seconds", "startup_timeout_seconds", "health_timeout_seconds",
                     "stop_timeout_seconds", "final_evaluation_timeout_seconds"):
            check(getattr(self, name) > 0, name, "> 0 seconds")
        check(self.log_time_delta >= 0, "log_time_delta", ">= 0 seconds")
        for name in ("actor_resources", "learner_resources", "replay_resources"):
            check(valid_resources(getattr(self, name)), name,
                  'None or a mapping of Ray resource names to amounts >= 0, e.g. {"worker": 1}')


def valid_resources(value: Any) -> bool:
    """None or {name: amount >= 0}; Ray's own CPU/GPU keys are not custom resources."""
    if value is None:
        return True
    if not isinstance(value, dict):
        return False
    return all(isinstance(key, str) and key and key not in ("CPU", "GPU") and not isinstance(amount, bool)
               and isinstance(amount, (int, float)) and amount >= 0 for key, amount in value.items())


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
    evaluation_rows: list[dict[str, Any]]
    """The evaluator's rows (one per round, the local trainer's columns), in order."""
    replay: Any
    """Final `TableStats` of the replay table (None if unavailable)."""
    replay_history: list[tuple[float, Any]]
    """(seconds since start, `TableStats`) per monitoring pass that got an answer, and one at the stop."""
    replay_frames: dict[str, float] | None
    """Final frame statistics of a frame-deduplicating replay table (`frames_per_item`, ...), else None."""
    evaluations: int
    """Evaluation rounds asked for so far (across resumes)."""
    wall_seconds: float
    run_dir: str
    resumed_from: int | None
    stop_reason: str | None = None
    """Why a callback stopped the run early (`dmpo.lifecycle.callbacks`), else None."""
    last_evaluation: dict[str, Any] | None = None
    """The summary of the newest evaluation round the driver saw (`return_mean`, ..., `actor_steps`)."""


def check_program(config: Any, options: ProgramOptions) -> None:
    """A `ConfigError` for a run the program cannot train: no actors, or a learner budget between calls."""
    if config.actors < 1:
        raise ConfigError(f"TrainConfig.actors must be >= 1 for the distributed program, got {config.actors}")
    calls = config.agent.learner.sgd_steps_per_call
    if options.max_learner_steps is not None and options.max_learner_steps % calls:
        raise ConfigError(f"ProgramOptions.max_learner_steps must be a multiple of "
                          f"agent.learner.sgd_steps_per_call ({calls}): one learner call runs {calls} "
                          f"updates, so the budget could not be met exactly; got {options.max_learner_steps}")
