"""The shared counter: one root `Counter` in a Ray actor, and the proxy that child counters push to.

Every node owns a local child `Counter(parent=RemoteCounter(service), prefix=...)`; the child
accumulates and pushes its counts at most once per second (algorithm.md §7.5), so the service sees a bounded
number of calls however fast the nodes step. The driver reads the totals from the service for the
progress line and the stop conditions, and the learner stores them in its checkpoint for resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray

from dmpo.run.distributed.common import NODE_OPTIONS
from dmpo.utils.counting import Counter

Number = int | float


class CounterService:
    """Root counter living in its own Ray actor (threaded: calls never wait on each other long).

    It also holds the run's schedule (`dmpo.lifecycle.schedule.RunSchedule`, None: none), because the
    schedule is checked with the shared total: each acting node calls `check_schedule` at its episode
    ends, as one process checks at each of its episode ends. Given the learner (`set_learner`), a due
    evaluation asks it for its variables at once, so the round scores the policy of that moment
    whenever the evaluator gets to it, and a due checkpoint is written before the acting node goes on
    (the node that found it due waits for it, as one process does; the others keep acting). The
    driver collects the due events with `take_due`. `evaluations`: rounds before this run (resumed).
    """

    def __init__(self, schedule: Any = None, evaluations: int = 0) -> None:
        import threading

        self._counter = Counter()
        self._schedule = schedule
        self._evaluations = evaluations  # what the checkpoints record (the boundary rounds asked for)
        self._schedule_lock = threading.Lock()
        self._learner: Any = None
        self._due: list[tuple[str, int, list[Any], bool]] = []  # (event, env steps, [ref] or [], filmed)
        self._returns: list[float] = []  # training episodes' returns since the last `take_due` (status line)

    def set_learner(self, learner: Any) -> None:
        self._learner = learner

    def check_schedule(self, env_steps: int, episode_return: float | None = None) -> None:
        """One check of the schedule at an acting node's episode end with the shared total `env_steps`
        (`episode_return`: that episode's, for the driver's status line)."""
        with self._schedule_lock:
            if episode_return is not None:
                self._returns = [*self._returns[-99:], float(episode_return)]
            if self._schedule is None:
                return
            due = self._schedule.check(int(env_steps))
            if due.evaluation is not None:
                self._evaluations += 1
                variables = [self._learner.get_variables.remote()] if self._learner is not None else []
                self._due.append(("evaluation", due.evaluation, variables, due.video is not None))
            save = None
            if due.checkpoint is not None and self._learner is not None:
                save = self._learner.save.remote(self._evaluations, before_steps=self._schedule.total_steps)
        if save is not None:  # outside the lock: other nodes' checks go on meanwhile
            # However long the save takes (a large replay table): the driver hears of it once written,
            # so a slow save is never taken for a dead learner; an error is the driver's to report.
            ray.wait([save], timeout=None)
            with self._schedule_lock:
                self._due.append(("checkpoint", due.checkpoint, [save], False))

    def take_due(self) -> tuple[list[tuple[str, int, list[Any], bool]], list[float]]:
        """The events that fell due since the last call, in order, and the episode returns since then
        (the newest 100 at most)."""
        with self._schedule_lock:
            due, self._due = self._due, []
            returns, self._returns = self._returns, []
            return due, returns

    def video_boundaries(self) -> tuple[bool, int | None]:
        """What the acting nodes' checks did with the video boundaries, for the driver's final events:
        whether one passed since the last evaluation found due, and the next one not crossed yet."""
        with self._schedule_lock:
            if self._schedule is None:
                return False, None
            return bool(self._schedule.video_pending), self._schedule.videos.next

    def increment(self, **counts: Number) -> dict[str, Number]:
        return self._counter.increment(**counts)

    def get_counts(self) -> dict[str, Number]:
        return self._counter.get_counts()

    def restore(self, counts: Mapping[str, Number]) -> dict[str, Number]:
        """Adds checkpointed totals (resume); counts pushed before this call are kept on top."""
        return self._counter.increment(**counts)

    def ping(self) -> bool:
        return True


RemoteCounterService = ray.remote(num_cpus=0, max_concurrency=8, **NODE_OPTIONS)(CounterService)


class RemoteCounter:
    """Parent proxy for a local `Counter`: forwards a push to the counter service and waits for totals.

    The wait is bounded by `timeout` seconds so a dead service surfaces as an error in the pushing node
    instead of a hang.
    """

    def __init__(self, service: Any, timeout: float = 60.0) -> None:
        self._service = service
        self._timeout = timeout

    def increment(self, **counts: Number) -> dict[str, Number]:
        return ray.get(self._service.increment.remote(**counts), timeout=self._timeout)

    def get_counts(self) -> dict[str, Number]:
        return ray.get(self._service.get_counts.remote(), timeout=self._timeout)


def make_child_counter(service: Any, prefix: str, time_delta: float = 1.0) -> Counter:
    """A node's local counter, pushing `<prefix>_<key>` counts to the service at most every `time_delta` s."""
    return Counter(parent=RemoteCounter(service), prefix=prefix, time_delta=time_delta)
