"""The evaluator node: the target policy's mean on its own environment (algorithm.md §7.2, §8.2 item 17).

It evaluates in rounds of `episodes_per_round` episodes (`TrainConfig.eval_episodes`) with the
builder's evaluation actor, which writes nothing. A round starts when the driver asks for one
(`request()`, at every `TrainConfig.eval_every` environment-step boundary an acting node found due,
`dmpo.lifecycle.schedule`) and, if `period_seconds` is set, also once that many seconds have passed
since the previous round began. A boundary's round scores the learner's variables asked for when the
boundary was found due, and its row is labelled with those environment steps, as in one process,
however late the round runs; other rounds fetch the newest variables (blocking), and the final round
is labelled with the steps the driver names (at most those of the final checkpoint). `finish()` ends
`run()` after the rounds asked for; `stop()` ends it now.

Each round runs on an environment of its own, seeded by the run's seed and the round's index in the
run (`dmpo.utils.seeds.evaluation_seed`), and a round the driver asks to film is filmed, its own
episodes (the run's video rule, `dmpo.lifecycle.schedule`): the same episodes, seeds and videos as
one process. A round is `dmpo.agent.environment_loop.evaluate`, the single-process trainer's own
evaluation, and
writes the same row: one per round, `return_mean/std/min/max`, `length_mean` and every count, to the
`evaluator` logger (CSV/TensorBoard under the run directory), so `dmpo plot` and the benchmark
summaries read a distributed run as they read a local one. The driver collects the rows
(`rows(start)`) and acts on each one in one place (`DistributedProgram._on_evaluation`). The
parameters each of the last few rounds scored are kept, so that the driver's best-policy callback
(`dmpo.lifecycle.callbacks`) can have them written as a snapshot (`save_round_policy`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from dmpo.run.distributed.common import ACTING_NODE_ENV, NODE_OPTIONS, NodeSettings, make_node_logger
from dmpo.run.distributed.counter_service import make_child_counter
from dmpo.run.distributed.variables import AsyncVariableClient

_KEPT_ROUND_PARAMS = 4  # rounds whose parameters the best-policy callback can still have written


@dataclasses.dataclass(frozen=True)
class Round:
    """One round asked for: its label (env steps; None: a periodic round), the learner's variables to
    score (`[ref]`; empty: the newest), its index in the run (its environment's seed) and whether it
    is filmed."""

    env_steps: int | None = None
    variables: tuple[Any, ...] = ()
    index: int | None = None
    film: bool = False


class RoundRequests:
    """The evaluation rounds asked for and not yet started, handed out in the order the caller
    numbered them. The evaluator is a threaded Ray actor, which may run two `request` calls sent back
    to back in either order; a round must still start only after every round asked for before it.
    Not locked: the evaluator calls it under its own condition variable."""

    def __init__(self) -> None:
        self._waiting: dict[int, Round] = {}
        self.received = 0  # requests added
        self.started = 0  # requests handed out by `pop_next`

    def add(self, number: int | None, asked: Round) -> None:
        """`number`: how many requests the caller made before this one; None: the next in arrival order."""
        number = self.received if number is None else number
        if number < self.started or number in self._waiting:
            raise ValueError(f"evaluation request number {number} was already given")
        self.received += 1
        self._waiting[number] = asked

    def pop_next(self) -> Round | None:
        """The next round in the caller's order, or None while it has not arrived."""
        if self.started not in self._waiting:
            return None
        self.started += 1
        return self._waiting.pop(self.started - 1)


class EvaluatorNode:
    """See the module docstring."""

    def __init__(self, settings: NodeSettings, seed: int, learner: Any, counter_service: Any, *,
                 episodes_per_round: int = 1, period_seconds: float | None = None) -> None:
        if not isinstance(episodes_per_round, int) or episodes_per_round < 1:
            raise ValueError(f"episodes_per_round must be a positive integer, got {episodes_per_round!r}")
        if period_seconds is not None and not period_seconds >= 0:
            raise ValueError(f"evaluator period_seconds must be >= 0 or None, got {period_seconds!r}")
        self._episodes_per_round = episodes_per_round
        self._period = period_seconds
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._round = Round()  # the round running now
        self._finishing = False
        self._requests_expected: int | None = None
        self._settings, self._seed = settings, seed
        self._learner = learner
        self._boundary_variables: Any = None  # the round's `learner.get_variables` ref, if it has one
        # Periodic blocking refreshes only: the period is never reached by the step count.
        self._variables = AsyncVariableClient(self._variables_request, update_period=2**62)
        self._actor = settings.builder.make_evaluation_actor(self._variables)
        self._requests = RoundRequests()  # the rounds asked for, not started
        self._counter = make_child_counter(counter_service, "evaluator", settings.counter_time_delta)
        self._logger = make_node_logger("evaluator", settings.run_dir, time_delta=0.0)
        self.returns: list[tuple[int, float]] = []  # (learner variable version, episode return)
        self._rows: list[dict[str, Any]] = []
        self.rounds = 0
        self._round_params: dict[int, Any] = {}  # row index -> the params that round scored (newest few)

    def _variables_request(self) -> Any:
        if self._boundary_variables is not None:
            return self._boundary_variables
        return self._learner.get_variables.remote()

    def _evaluate_round(self, asked: Round) -> dict[str, Any]:
        """One round (module docstring); logs its row (the local trainer's columns) and returns it.
        With variables it scores those and is labelled with its env steps; otherwise the newest weights."""
        env_steps, variables = asked.env_steps, asked.variables
        self._boundary_variables = variables[0] if variables else None
        try:
            self._variables.update(wait=True)
        finally:
            self._boundary_variables = None
        self._actor.update(wait=True)
        version = self._variables.version
        result = self._play(asked)
        self.returns.extend((version, float(value)) for value in result["episode_returns"])
        self._counter.increment(episodes=self._episodes_per_round, steps=int(sum(result["episode_lengths"])))
        counts = self._counter.sync()  # the totals of every node, this round's episodes included
        row = {**{key: value for key, value in result.items() if np.isscalar(value)}, **counts,
               "wall_seconds": self._settings.wall_seconds()}  # as the local trainer's rows (time to score)
        if env_steps is not None:  # the moment the round scored: its environment steps and the learner
            # step (the final round's label is at most the final checkpoint's steps, so a --resume keeps it)
            row.update(actor_steps=int(env_steps), learner_steps=max(int(version), 0))
        self._logger.write(row)
        self._rows.append(row)
        self._round_params[len(self._rows) - 1] = self._variables.params
        for old in sorted(self._round_params)[:-_KEPT_ROUND_PARAMS]:
            del self._round_params[old]
        return row

    def _play(self, asked: Round) -> dict[str, Any]:
        """The round's episodes, on an environment of its own (filmed when asked)."""
        from dmpo.agent.environment_loop import evaluate
        from dmpo.lifecycle.videos import camera_render_fn, rendering_factory, video_path
        from dmpo.utils.seeds import evaluation_seed

        seed = (evaluation_seed(self._settings.seed, asked.index) if asked.index is not None
                else evaluation_seed(self._seed, self.rounds))  # a periodic round: the node's own stream
        film = asked.film and asked.env_steps is not None
        factory = rendering_factory(self._settings.env_factory) if film else self._settings.env_factory
        environment = factory(seed)
        try:
            if not film:
                return evaluate(environment, self._actor.select_action, self._episodes_per_round)
            return evaluate(environment, self._actor.select_action, self._episodes_per_round,
                            video_path=video_path(self._settings.run_dir, asked.env_steps),
                            render_fn=camera_render_fn())
        finally:
            close = getattr(environment, "close", None)
            if close is not None:
                close()

    def rows(self, start: int = 0) -> list[dict[str, Any]]:
        """The evaluation rows logged so far, from index `start` on (the driver's collection)."""
        return list(self._rows[start:])

    def save_round_policy(self, index: int, path: str, metadata: dict[str, Any]) -> str | None:
        """Writes the parameters round `index` scored as a policy snapshot; None if no longer kept."""
        from dmpo.agent.policies.snapshot import save_policy

        params = self._round_params.get(index)
        if params is None:
            return None
        builder = self._settings.builder
        metadata = {**metadata, "learner_steps": int(self._rows[index].get("learner_steps", 0))}
        return str(save_policy(Path(path), builder.environment_spec, builder.config.networks, params,
                               metadata=metadata))

    def request(self, env_steps: int | None = None, variables: list[Any] | None = None,
                number: int | None = None, index: int | None = None, film: bool = False) -> None:
        """Asks for one more evaluation round (at `env_steps`: its label when `variables` is given, and
        its video's name); `variables`: `[ref]` to the learner's variables to score; `index`: the
        round's index in the run (its environment's seed); `film`: film the round.

        `number`: the caller's count of its earlier requests to this node. Rounds start in that order
        whatever order Ray runs the calls in (a threaded actor may swap two calls sent back to back);
        None: in the order the calls run."""
        with self._wake:
            self._requests.add(number, Round(env_steps, tuple(variables or ()), index, film))
            self._wake.notify_all()

    def finish(self, requests: int | None = None) -> None:
        """Lets `run()` return once the rounds asked for are done. `requests`: how many `request()` calls
        the caller made; Ray may run this call before some of them on a threaded actor, so `run()` then
        waits for them all."""
        with self._wake:
            self._finishing = True
            self._requests_expected = requests
            self._wake.notify_all()

    def _next_round(self, last_start: float | None) -> bool:
        """Waits for the next round (True) or the end (False)."""
        with self._wake:
            while not self._stop.is_set():
                asked = self._requests.pop_next()
                if asked is not None:
                    self._round = asked
                    return True
                expected = self._requests_expected
                if self._finishing and (expected is None or self._requests.started >= expected):
                    return False
                wait = 1.0
                if self._period is not None:
                    due = (last_start or 0.0) + self._period - time.monotonic()
                    if last_start is None or due <= 0:
                        self._round = Round()
                        return True
                    wait = min(wait, due)
                self._wake.wait(wait)
            return False

    def run(self) -> list[tuple[int, float]]:
        """Evaluates until `finish()` or `stop()`; returns every (variable version, return) pair."""
        try:
            # Each round builds its environment on this thread: a pixel environment's OpenGL context is
            # bound to its creating thread.
            started = None
            while self._next_round(started):
                started = time.monotonic()
                self._evaluate_round(self._round)
                self.rounds += 1
        finally:
            self._counter.sync()
            self._logger.close()
        return self.returns

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    def ping(self) -> int:
        return len(self.returns)

    def returns_since(self, start: int) -> list[float]:
        """The returns of the episodes after the first `start` (for the driver's evaluation lines)."""
        return [value for _, value in self.returns[start:]]

    def latest(self) -> tuple[int, int, float] | None:
        """`(episodes evaluated so far, learner step of the weights, return)` of the newest episode."""
        return (len(self.returns), *self.returns[-1]) if self.returns else None


def make_evaluator_node(settings: NodeSettings, seed: int, learner: Any, counter_service: Any,
                        resources: dict[str, float] | None = None, **kwargs: Any) -> Any:
    cls = ray.remote(num_cpus=0, max_concurrency=4, max_restarts=0, **NODE_OPTIONS)(EvaluatorNode)
    return cls.options(runtime_env={"env_vars": dict(ACTING_NODE_ENV)}, resources=resources or {}).remote(
        settings, seed, learner, counter_service, **kwargs)
