"""A run's status, as run.json records it: `starting -> running -> finished | interrupted | failed`.

    starting     the run directory exists (or a resume began); nothing has trained yet
    running      training has begun
    finished     the step budget was reached, or a callback stopped the run (the reason says which)
    interrupted  a signal (Ctrl-C, SIGTERM, SIGHUP) stopped it; a final checkpoint was attempted
    failed       an error stopped it; the reason holds the error's first line

A run can end from `starting` (interrupted or failed before its first step) but cannot finish
without having run. An ended run starts again only through a resume (`restart`), which also
accepts a run.json left `starting` or `running` by a process that was killed outright: the run
lock (`dmpo.lifecycle.lock`) shows that no process runs it any more. Every other change is refused
(`IllegalTransition`), so a bug cannot, say, mark a failed run finished.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["ENDED", "IllegalTransition", "RunStatus", "Status", "check_transition"]

Status = Literal["starting", "running", "finished", "interrupted", "failed"]
STATUSES: tuple[str, ...] = ("starting", "running", "finished", "interrupted", "failed")
ENDED = frozenset({"finished", "interrupted", "failed"})

_ALLOWED: dict[str | None, frozenset[str]] = {
    None: frozenset({"starting"}),  # a new run directory
    "starting": frozenset({"running", "interrupted", "failed"}),
    "running": frozenset(ENDED),
    **{ended: frozenset() for ended in ENDED},  # only `restart` leaves an ended status
}


class IllegalTransition(RuntimeError):
    """A status change the run's life does not allow."""


def check_transition(current: str | None, new: str) -> None:
    """Raises `IllegalTransition` unless a run may go from `current` (None: no status yet) to `new`."""
    if new not in STATUSES:
        raise ValueError(f"status must be one of {list(STATUSES)}, got {new!r}")
    if current is not None and current not in STATUSES:
        raise ValueError(f"unknown run status {current!r} (expected one of {list(STATUSES)})")
    if new not in _ALLOWED[current]:
        allowed = sorted(_ALLOWED[current]) or ["nothing (only a resume restarts it)"]
        raise IllegalTransition(f"a run cannot go from {current!r} to {new!r}; from {current!r} it can "
                                f"go to {', '.join(allowed)}")


class RunStatus:
    """The status of one run directory, changed only along the allowed transitions.

    `run` is a `dmpo.lifecycle.directory.RunDirectory`; every change is written to its run.json at once
    (atomically), with the reason in "status_reason".
    """

    def __init__(self, run: Any) -> None:
        self._run = run
        self.current: str | None = run.info().get("status")
        if self.current not in (None, *STATUSES):
            raise ValueError(f"{run.info_path}: unknown status {self.current!r}")
        self.reason: str | None = run.info().get("status_reason")

    def _set(self, status: str, reason: str | None) -> None:
        check_transition(self.current, status)
        self._run.set_status(status, reason=reason)
        self.current, self.reason = status, reason

    def running(self) -> None:
        """Training has begun."""
        self._set("running", None)

    def finished(self, reason: str | None = None) -> None:
        """The budget was reached, or `reason` (a callback's stop) ended the run."""
        self._set("finished", reason)

    def interrupted(self, reason: str | None = None) -> None:
        self._set("interrupted", reason)

    def failed(self, reason: str) -> None:
        self._set("failed", reason)

    def end(self, status: str, reason: str | None = None) -> None:
        """Ends the run with `status` (finished, interrupted or failed)."""
        if status not in ENDED:
            raise ValueError(f"a run ends as one of {sorted(ENDED)}, got {status!r}")
        self._set(status, reason)

    @property
    def ended(self) -> bool:
        return self.current in ENDED

    def restart(self) -> None:
        """A resume begins: back to `starting` from whatever status the last process left."""
        self._run.set_status("starting", reason=None)
        self.current, self.reason = "starting", None
