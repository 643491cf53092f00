"""Health checks of the nodes the distributed program cannot run without (learner, replay, counter).

Each pass of `HealthChecks.poll()` keeps one outstanding call per node and never waits: an answer is
collected when it has arrived, a failed call or one unanswered for too long is a `NodeDown`. A node
that has not answered yet gets `startup_timeout` seconds (the learner compiles, the replay node may
load a large replay file), later calls `health_timeout`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from dmpo.run.distributed.node_errors import describe


class NodeDown(Exception):
    """A health check failed or went unanswered; `node` names the node, `error` says why."""

    def __init__(self, node: str, error: BaseException) -> None:
        super().__init__(f"{node}: {error}")
        self.node = node
        self.error = error


class HealthChecks:
    """`checks` maps a node name to a function that sends its health call (returns an ObjectRef)."""

    def __init__(self, checks: dict[str, Callable[[], Any]], *, startup_timeout: float,
                 health_timeout: float) -> None:
        self._checks = checks
        self._startup_timeout = startup_timeout
        self._health_timeout = health_timeout
        self._pending: dict[str, tuple[Any, float]] = {}  # node -> (outstanding call, when it was sent)
        self._answered: set[str] = set()

    def poll(self) -> dict[str, Any]:
        """The answers that arrived since the last pass, by node; raises `NodeDown`."""
        answers: dict[str, Any] = {}
        now = time.monotonic()
        for name, send in self._checks.items():
            if name not in self._pending:
                self._pending[name] = (send(), now)
            ref, sent_at = self._pending[name]
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                allowed = self._health_timeout if name in self._answered else self._startup_timeout
                if now - sent_at > allowed:
                    silence = TimeoutError(f"no answer to a health check for {now - sent_at:.0f} s")
                    raise NodeDown(name, silence)
                continue
            try:
                answers[name] = ray.get(ref)
            except Exception as error:
                raise NodeDown(name, error) from error
            self._answered.add(name)
            del self._pending[name]
        return answers


def culprit_of_learner_failure(replay: Any) -> str:
    """Which node to name when the learner's call failed: the replay node if it is gone (the learner,
    waiting on it for data, is usually the first to notice), else the learner."""
    try:
        ray.get(replay.ping.remote(), timeout=5.0)
    except ray.exceptions.RayActorError:
        return "replay"
    except Exception:  # slow or unreachable for another reason: do not guess
        pass
    return "learner"


def failure_message(node: str, error: BaseException, run_dir: Path) -> str:
    """What the program says when a critical node failed: which, why, and where to resume from."""
    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    latest = TrainingCheckpoints(run_dir / "checkpoints").latest()
    where = (f"the latest checkpoint is {latest}; run again with resume=True to continue from it"
             if latest is not None else "no checkpoint was written yet")
    return (f"the {node} node failed ({describe(error)}); the distributed "
            f"program was stopped and all its nodes shut down; {where}")
