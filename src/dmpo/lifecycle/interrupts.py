"""SIGTERM and SIGHUP take the Ctrl-C path: a final checkpoint, status "interrupted", the resume hint.

SLURM, Kubernetes, systemd and `timeout` stop a job with SIGTERM (a closed terminal sends SIGHUP);
Python's default for both is to die at once, without the checkpoint a Ctrl-C writes. Inside
`interrupt_on_signals()` both raise `Interrupted` (a `KeyboardInterrupt`, so every `except
KeyboardInterrupt` of the trainers handles them as it handles Ctrl-C) in the main thread. Ctrl-C
(SIGINT) gets the same handler, so that all three wait for the end of a `critical()` block (a
learner step, a replay insert) instead of cutting it in half.

Exit codes of `dmpo train` after an interrupt follow the shell's convention, 128 + the signal's
number: 130 for Ctrl-C (SIGINT), 143 for SIGTERM, 129 for SIGHUP (`exit_code`).

Ray's `ray.init` installs its own SIGTERM handler in the driver (it exits with code 15 at once), so
the distributed driver enters `interrupt_on_signals()` again after the cluster has started.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["CriticalCalls", "Interrupted", "annotate", "critical", "exit_code", "interrupt_on_signals",
           "message"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM or SIGHUP arrives; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


def _interrupt(signum: int) -> KeyboardInterrupt:
    # Ctrl-C raises what Python itself raises; the others say which signal came.
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


_SIGNALS_DEFERRED = {"depth": 0, "pending": None}  # see `critical`


class _Handler:
    """Raises `Interrupted` on the first signal, or notes it while a `critical` block runs (raised
    when the block ends). Later signals are ignored once one was raised, so a second SIGTERM from a
    scheduler cannot break the final checkpoint it is waiting for; a second signal while one is
    pending raises at once (a block that hangs can still be interrupted)."""

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, signum: int, frame: object) -> None:
        del frame
        if self.fired:
            return
        if _SIGNALS_DEFERRED["depth"] and _SIGNALS_DEFERRED["pending"] is None:
            _SIGNALS_DEFERRED["pending"] = signum
            return
        self.fired = True
        _SIGNALS_DEFERRED["pending"] = None
        raise _interrupt(signum)


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Defers an interrupt that arrives inside the block to its end.

    A learner step donates its state's buffers to the compiled update: an exception raised inside it
    leaves the learner holding deleted arrays, and the final checkpoint cannot be written. The same
    holds for a replay insert cut in half. The local trainer runs every actor call in this block.
    """
    _SIGNALS_DEFERRED["depth"] += 1
    try:
        yield
    finally:
        _SIGNALS_DEFERRED["depth"] -= 1
    pending = _SIGNALS_DEFERRED["pending"]
    if pending is not None and not _SIGNALS_DEFERRED["depth"]:
        _SIGNALS_DEFERRED["pending"] = None
        raise _interrupt(pending)


class CriticalCalls:
    """`target`'s methods, each run inside `critical()` (the trainer wraps its actor in this)."""

    def __init__(self, target: object) -> None:
        self._target = target

    def __getattr__(self, name: str) -> object:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: object, **kwargs: object) -> object:
            with critical():
                return value(*args, **kwargs)

        return call


def exit_code(error: KeyboardInterrupt) -> int:
    """128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + int(getattr(error, "signum", signal.SIGINT))


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Interrupted` and SIGINT `KeyboardInterrupt`, unless
    ignored when the block starts (a no-op outside the main thread,
    where Python cannot install handlers). The previous handlers come back when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Handler()
    # A signal this process was started with ignored stays ignored: `nohup` ignores SIGHUP, and a
    # shell starts background jobs with SIGINT ignored.
    previous = {signum: signal.signal(signum, handler) for signum in _SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)


def annotate(error: KeyboardInterrupt, env_steps: int, run_dir: object) -> None:
    """Notes on an interrupt where the run stopped, for the one line `dmpo train` prints."""
    error.env_steps = int(env_steps)  # type: ignore[attr-defined]
    error.run_dir = str(run_dir)  # type: ignore[attr-defined]


def message(error: KeyboardInterrupt) -> str:
    """`interrupted at N env steps; resume with: dmpo train --resume RUN` (or less, when the run had
    not started: nothing to resume)."""
    steps, run_dir = getattr(error, "env_steps", None), getattr(error, "run_dir", None)
    if steps is None or run_dir is None:
        return "interrupted before training started"
    return f"interrupted at {steps} env steps; resume with: dmpo train --resume {run_dir}"
