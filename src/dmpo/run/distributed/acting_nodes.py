"""The nodes a distributed run may lose and replace: its actors and its evaluator (algorithm.md §7).

`ActingNodes` starts them, checks once per monitoring pass which of their `run()` calls ended, and
replaces a failed one: an actor by a new one with a new seed (its generation counts up, so the seed
differs), up to `ProgramOptions.max_actor_restarts` replacements in all; the evaluator the same way,
up to as many. A node whose own code failed the same way twice in a row is not restarted a third
time: the run stops with that exception (`node_errors.RepeatedFailures`), as one process would.

A node lost with its machine is replaced once the machine is declared dead (`health.wait_for_fate`):
a replacement started earlier would go to the dying machine and be lost, and replaced, again.
Losing the learner, the replay table or the counters ends the program instead, which the executor
recovers from its newest checkpoint (`executor.RayExecutor`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import ray

from dmpo.config import TrainConfig
from dmpo.run.distributed.actor import make_actor_node
from dmpo.run.distributed.common import NodeSettings, call_quietly, get_quietly, kill
from dmpo.run.distributed.evaluator import make_evaluator_node
from dmpo.run.distributed.health import host_of, wait_for_fate
from dmpo.run.distributed.node_errors import RepeatedFailures, describe, node_error, remote_traceback
from dmpo.run.distributed.options import NodeFailure, ProgramOptions
from dmpo.utils.seeds import ROLE_ACTOR, ROLE_EVALUATOR, node_seed


def warn(line: str) -> None:
    """What the operator should see as it happens (a node replaced or waiting), on the driver's console."""
    print(f"dmpo: warning: {line}", file=sys.stderr, flush=True)


class ActingNodes:
    """The actors and the evaluator of one run (module docstring).

    `on_evaluator` is called with each evaluator node started (the first and every replacement), so
    that the driver's rounds go to the node that exists now.
    """

    def __init__(self, config: TrainConfig, options: ProgramOptions, seed: int,
                 on_evaluator: Callable[[Any], None], check_critical: Callable[[], None]) -> None:
        self.config, self.options, self.seed = config, options, seed
        self._on_evaluator = on_evaluator
        # Before a failed node is replaced: raises the NodeFailure of a learner, replay node or counter
        # that is gone (the acting node's call to it is then what failed, and replacing it is no use).
        self._check_critical = check_critical
        self.actor_handles: list[Any] = []
        self._actor_refs: list[Any] = []  # each actor's `run()` call; None once it has ended
        self._actor_generation: list[int] = []
        self.actor_results: list[dict[str, Any]] = []
        self.actor_restarts = 0
        self.evaluator: Any = None
        self._evaluator_ref: Any = None
        self._evaluator_generation = 0
        self.evaluator_returns: list[tuple[int, float]] = []
        self._failures = RepeatedFailures()  # a node failing the same way twice is not restarted again
        self._nodes: tuple[NodeSettings, Any, Any, Any] | None = None
        self._hosts: dict[str, Any] = {}  # node name -> the Ray node (machine) it runs on (a ref)

    def start(self, settings: NodeSettings, learner: Any, replay: Any, counter: Any, evaluator: bool) -> None:
        """Starts `config.actors` actors, and the evaluator when `evaluator`."""
        self._nodes = (settings, learner, replay, counter)
        for index in range(self.config.actors):
            self._actor_generation.append(0)
            self.actor_handles.append(None)
            self._actor_refs.append(None)
            self._start_actor(index)
        if evaluator:
            self._start_evaluator()

    @property
    def evaluator_running(self) -> bool:
        """An evaluator node exists and its `run()` has not ended."""
        return self.evaluator is not None and self._evaluator_ref is not None

    def placed_nodes(self) -> dict[str, tuple[Any, Any]]:
        """The nodes that may wait for a place on the cluster, and the resources each asks for."""
        actor = self.options.actor_resources or {}
        nodes = {f"actor {index}": (handle, actor) for index, handle in enumerate(self.actor_handles)}
        nodes["evaluator"] = (self.evaluator, actor)
        return nodes

    def check(self) -> None:
        """One monitoring pass: collects ended `run()` calls and replaces the nodes that failed."""
        self._check_actors()
        self._check_evaluator()

    def stop_actors(self) -> None:
        """Tells every actor to stop (each flushes its writer and pushes its counts); never waits."""
        for handle in self.actor_handles:
            call_quietly(handle, "stop")

    def collect(self, left: Callable[[], float], evaluator_left: Callable[[], float] | None = None) -> None:
        """Waits, each wait at most `left()` seconds, for the actors' results, and at most
        `evaluator_left()` (default `left()`) for the evaluator's."""
        for ref in self._actor_refs:
            result = get_quietly(ref, left())
            if result is not None:
                self.actor_results.append(result)
        if self._evaluator_ref is not None:
            self.evaluator_returns.extend(get_quietly(self._evaluator_ref, (evaluator_left or left)()) or [])

    def kill(self) -> None:
        for handle in [*self.actor_handles, self.evaluator]:
            kill(handle)

    def _start_actor(self, index: int) -> None:
        assert self._nodes is not None, "start() first"
        settings, learner, replay, counter = self._nodes
        generation = self._actor_generation[index]
        handle = make_actor_node(
            settings, index, node_seed(self.seed, ROLE_ACTOR, index, generation), learner, replay, counter,
            persist_logs=index == 0, insert_batch_size=self.options.insert_batch_size,
            max_inserts_in_flight=self.options.max_inserts_in_flight, total_steps=self.config.steps,
            resources=self.options.actor_resources)
        self.actor_handles[index] = handle
        self._actor_refs[index] = handle.run.remote()
        self._hosts[f"actor {index}"] = handle.__ray_call__.remote(host_of)

    def _start_evaluator(self) -> None:
        assert self._nodes is not None, "start() first"
        settings, learner, _, counter = self._nodes
        self.evaluator = make_evaluator_node(
            settings, node_seed(self.seed, ROLE_EVALUATOR, 0, self._evaluator_generation), learner, counter,
            episodes_per_round=max(self.config.eval_episodes, 1),
            period_seconds=self.options.evaluator_period_seconds, resources=self.options.actor_resources)
        self._evaluator_ref = self.evaluator.run.remote()
        self._hosts["evaluator"] = self.evaluator.__ray_call__.remote(host_of)
        self._on_evaluator(self.evaluator)

    def _check_actors(self) -> None:
        refs = [ref for ref in self._actor_refs if ref is not None]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        for ref in ready:
            index = self._actor_refs.index(ref)
            self._actor_refs[index] = None
            try:
                self.actor_results.append(ray.get(ref))
            except Exception as error:
                self._replace_actor(index, error)

    def _replace_actor(self, index: int, error: BaseException) -> None:
        self._check_critical()
        wait_for_fate(get_quietly(self._hosts.get(f"actor {index}"), 0.5), error)
        self._stop_if_repeated(f"actor {index}", error)
        if self.actor_restarts >= self.options.max_actor_restarts:
            raise NodeFailure(f"actor {index} failed ({describe(error)}) after "
                              f"{self.actor_restarts} actor restarts (max_actor_restarts); the program "
                              "was stopped") from error
        self.actor_restarts += 1
        warn(f"actor {index} failed ({describe(error)}); a new one takes its place "
             f"({self.actor_restarts} of at most {self.options.max_actor_restarts} replacements)")
        kill(self.actor_handles[index])
        self._actor_generation[index] += 1
        self._start_actor(index)

    def _check_evaluator(self) -> None:
        if self._evaluator_ref is None:
            return
        ready, _ = ray.wait([self._evaluator_ref], timeout=0)
        if not ready:
            return
        try:
            self.evaluator_returns.extend(ray.get(self._evaluator_ref))
            self._evaluator_ref = None
        except Exception as error:
            self._check_critical()
            wait_for_fate(get_quietly(self._hosts.get("evaluator"), 0.5), error)
            self._stop_if_repeated("evaluator", error)
            if self._evaluator_generation >= self.options.max_actor_restarts:
                raise NodeFailure(f"the evaluator failed ({describe(error)}) too often") from error
            warn(f"the evaluator failed ({describe(error)}); a new one takes its place")
            kill(self.evaluator)
            self._evaluator_generation += 1
            self._start_evaluator()

    def _stop_if_repeated(self, node: str, error: BaseException) -> None:
        """A node whose own code failed the same way twice in a row would fail a third time: the run
        stops with that node's exception (its type and message, as in one process)."""
        if not self._failures.repeated(node, error):
            return
        original = node_error(error)
        traceback = remote_traceback(error)
        if traceback and hasattr(original, "add_note"):
            original.add_note(f"{node} failed twice in a row this way and was not restarted again; its "
                              f"traceback:\n{traceback}")
        raise original from None
