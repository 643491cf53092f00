"""What the driver, the Ray executor and tools read of a running `DistributedProgram`: its nodes, the
rounds asked for, the evaluator's latest returns (never waiting long), the time since it started."""

from __future__ import annotations

import time
from typing import Any

import ray

from dmpo.run.distributed.common import get_quietly


class ProgramViews:
    """Read-only views of a `DistributedProgram` (its attributes are set by the program)."""

    builder: Any
    rounds: Any
    nodes: Any
    counter: Any
    counts: dict[str, Any]
    _started_at: float | None

    def env_steps_now(self, timeout: float) -> int:
        """The run's env steps, asked of the counter (its last health answer if it does not answer)."""
        counts = get_quietly(self.counter.get_counts.remote(), timeout) if self.counter else None
        return int((counts or self.counts).get("actor_steps", 0))

    @property
    def env_spec(self) -> Any:
        return self.builder.environment_spec

    @property
    def evaluations(self) -> int:
        """Evaluation rounds asked for in the whole run (a resumed run counts on from its checkpoint)."""
        return self.rounds.count

    @property
    def evaluation_steps(self) -> list[int]:
        """The env steps of the rounds asked for since this start, in order."""
        return self.rounds.steps

    @property
    def actor_handles(self) -> list[Any]:
        return self.nodes.actor_handles

    @property
    def actor_restarts(self) -> int:
        return self.nodes.actor_restarts

    @property
    def evaluator(self) -> Any:
        return self.nodes.evaluator

    def evaluation_returns_since(self, start: int) -> list[float] | None:
        """The evaluator's returns after its first `start` episodes (None when it cannot answer now)."""
        if not self.nodes.evaluator_running:
            return None
        try:
            return ray.get(self.evaluator.returns_since.remote(start), timeout=5.0)
        except Exception:
            return None

    def latest_evaluation(self) -> tuple[int, int, float] | None:
        """The evaluator's `(episodes so far, learner step, return)`, or None (never waits long)."""
        if not self.nodes.evaluator_running:
            return None
        try:
            return ray.get(self.evaluator.latest.remote(), timeout=5.0)
        except Exception:
            return None

    def elapsed(self) -> float:
        return 0.0 if self._started_at is None else time.monotonic() - self._started_at
