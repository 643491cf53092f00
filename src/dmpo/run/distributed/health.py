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

from dmpo.run.distributed.node_errors import describe, node_error


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


def lost_node(handles: dict[str, Any]) -> tuple[str, BaseException] | None:
    """The first of `handles` (node name -> Ray actor handle with `ping`) whose process is gone, and
    Ray's error for it; None when each answers (or is slow: slowness is not guessed at here)."""
    for node, handle in handles.items():
        if handle is None:
            continue
        try:
            ray.get(handle.ping.remote(), timeout=5.0)
        except ray.exceptions.RayActorError as error:
            return node, error
        except Exception:
            pass
    return None


def host_of(_node: Any) -> str:
    """Run inside a node (`handle.__ray_call__.remote(host_of)`): the Ray node (machine) it lives on."""
    return ray.get_runtime_context().get_node_id()


def wait_for_fate(host: str | None, error: BaseException, limit: float = 60.0) -> None:
    """After `error` from a node on the machine `host`: when the machine stopped answering (an
    unavailable actor, a silent health check) and Ray still counts it alive, waits (at most `limit`
    seconds) until Ray declares it dead, so that a replacement is not placed on it. A process that
    died on a live machine is not waited for."""
    unreachable = isinstance(node_error(error), (ray.exceptions.ActorUnavailableError, TimeoutError))
    deadline = time.monotonic() + limit
    while host is not None and unreachable and time.monotonic() < deadline:
        if not any(node["NodeID"] == host and node["Alive"] for node in ray.nodes()):
            return
        time.sleep(0.5)


def failure_message(node: str, error: BaseException, run_dir: Path) -> str:
    """What the program says when a critical node failed: which, why, and where to resume from."""
    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    latest = TrainingCheckpoints(run_dir / "checkpoints").latest()
    where = (f"the latest checkpoint is {latest}; run again with resume=True to continue from it"
             if latest is not None else "no checkpoint was written yet")
    return (f"the {node} node failed ({describe(error)}); the distributed "
            f"program was stopped and all its nodes shut down; {where}")
