"""SIGINT, SIGTERM and SIGHUP take one stop path: a final checkpoint, status "interrupted", one line.

SLURM, Kubernetes, systemd and `timeout` stop a job with SIGTERM (a closed terminal sends SIGHUP);
Python's default for both is to die at once, without the checkpoint a Ctrl-C writes. Inside
`interrupt_on_signals()` all three raise a `KeyboardInterrupt` in the main thread (`Interrupted`,
naming the signal, for SIGTERM and SIGHUP), so every `except KeyboardInterrupt` of the trainers
handles them as it handles Ctrl-C.

When a signal is raised matters as much as that it is:

- `starting_up()`: importing and initialising JAX or starting Ray cut in half by an exception
  crashes the interpreter or leaves Ray's processes behind. A signal that arrives while a run starts
  is kept and raised by `training_started()` (or at the end of the block), where the trainers can
  write their step-0 checkpoint and mark the run interrupted.
- `critical()`: a learner step donates its state's buffers; a replay insert cut in half corrupts
  the table. A signal inside waits for the end of the block.
- An interrupt raised inside a garbage-collector callback or a `__del__` is swallowed by Python
  ("Exception ignored in ..."); it is delivered again right after (`sys.unraisablehook`).

After the first signal the run is stopping (writing its final checkpoint, stopping Ray): a second
signal is ignored and says so; a third Ctrl-C exits at once (the run's processes killed, the
previous checkpoint left as it was, run.json "interrupted").

Exit codes of `dmpo train` after an interrupt follow the shell's convention, 128 + the signal's
number: 130 for Ctrl-C (SIGINT), 143 for SIGTERM, 129 for SIGHUP (`exit_code`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from dmpo.lifecycle.deliveries import Deliveries

__all__ = ["CriticalCalls", "Interrupted", "abortable", "annotate", "as_signalled", "critical", "exit_code",
           "interrupt_on_signals", "message", "starting_up", "stopping_since", "training_started",
           "when_abandoned"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM or SIGHUP arrives; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


def _interrupt(signum: int) -> KeyboardInterrupt:
    # Ctrl-C raises what Python itself raises; the others say which signal came.
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


def _say(line: str) -> None:
    # Straight to the file descriptor: a handler may run in the middle of a write to sys.stderr.
    with contextlib.suppress(OSError):
        os.write(2, f"dmpo: {line}\n".encode())


class _Guard:
    """The state of one outermost `interrupt_on_signals()`: which signals came, whether one is waiting
    for a safe point (`pending`), whether one was raised (the run is stopping)."""

    def __init__(self) -> None:
        self.signals = 0
        self.pending: int | None = None
        self.raised = False
        self.starting = False  # inside `starting_up()`, before `training_started()`
        self.critical_depth = 0
        self.in_hook = False  # inside `redeliver`
        self.resending = False  # `redeliver` sent a swallowed interrupt again
        self.abandon: list[Callable[[], None]] = []
        # The first signal and its time.monotonic(): a stop's deadline counts from it.
        self.first_at: float | None = None
        self.first_signum: int | None = None
        self.deliveries = 0  # every delivery of one of our signals (`Deliveries`), less those resent
        self.ignored_lines = 0
        self.saying = threading.Lock()

    def deferring(self) -> bool:
        return self.starting or self.critical_depth > 0

    def __call__(self, signum: int, frame: object) -> None:
        del frame
        if self.resending:  # the interrupt a garbage-collector callback swallowed, sent again
            if self.in_hook:
                self._resend(signum)
                return
            self.resending = False
            self.signals += 1
            if self.deferring():
                self.pending = signum
                return
            self.raise_now(signum)
        self.signals += 1
        if self.first_at is None:
            self.first_at, self.first_signum = time.monotonic(), signum
        if self.raised or self.pending is not None:
            if signum == signal.SIGINT and self.signals >= 3:
                _exit_at_once(self, signum)
            self.say_ignored(signum)
            return
        if self.deferring():
            self.pending = signum
            return
        self.raise_now(signum)

    def say_ignored(self, signum: int, upto: int | None = None) -> None:
        """One line per ignored signal (the handler's count, or `upto` lines), whichever thread says it."""
        with self.saying:
            if self.ignored_lines >= (self.signals - 1 if upto is None else upto):
                return
            self.ignored_lines += 1
        what = "writing the final checkpoint" if self.raised else "waiting for a safe point to stop"
        _say(f"{signal.Signals(signum).name} ignored: already stopping ({what}); a third Ctrl-C "
             "exits at once, keeping the previous checkpoint")

    def delivered(self, signum: int) -> None:
        """Each delivery, on the `Deliveries` thread: a third Ctrl-C exits at once even when the main
        thread, held in a C call, runs the handler once for the second and the third."""
        if signum in _SIGNALS:
            self.deliveries += 1
            if signum == signal.SIGINT and self.deliveries >= 3:
                self.say_ignored(signum, upto=1)  # the second's line, if its handler has not run yet
                _exit_at_once(self, signum)

    def raise_now(self, signum: int) -> None:
        self.pending = None
        self.raised = True
        raise _interrupt(signum)

    def raise_pending(self) -> None:
        if self.pending is not None and not self.deferring():
            self.raise_now(self.pending)

    def redeliver(self, unraisable: Any) -> bool:
        """A raised interrupt swallowed by Python (a gc callback, a `__del__`): sent again, by another
        thread, so that it arrives after this hook has returned. True when it was one of ours."""
        if not isinstance(unraisable.exc_value, KeyboardInterrupt) or not self.raised:
            return False
        self.in_hook = True
        try:
            self.raised = False
            self.signals -= 1
            self.resending = True
            self._resend(int(getattr(unraisable.exc_value, "signum", signal.SIGINT)))
        finally:
            self.in_hook = False
        return True

    def _resend(self, signum: int) -> None:
        def send() -> None:
            if not threading.Event().wait(0.01) and self.resending and _guard is self:
                self.deliveries -= 1  # the same signal again, not another one
                os.kill(os.getpid(), signum)

        threading.Thread(target=send, daemon=True).start()


_guard: _Guard | None = None


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _exit_at_once(guard: _Guard, signum: int) -> None:
    """The third Ctrl-C: mark the run, kill every process this one started (Ray's included), exit."""
    for callback in guard.abandon:
        with contextlib.suppress(Exception):
            callback()
    _kill_descendants()
    _say("exited at once on a third Ctrl-C; the previous checkpoint is kept")
    os._exit(128 + signum)


def _kill_descendants() -> None:
    try:
        import psutil
    except ImportError:  # psutil comes with Ray; without it this process started no cluster
        return
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Interrupted` and SIGINT `KeyboardInterrupt` (see
    the module docstring for when), unless ignored when the block starts; a no-op outside the main
    thread, where Python cannot install handlers. Nested blocks share the outer block's state and
    put its handler back (`ray.init` installs its own); the outermost puts the previous ones back."""
    global _guard
    if not _on_main_thread():
        yield
        return
    outermost = _guard is None
    guard = _guard if _guard is not None else _Guard()
    # A signal this process was started with ignored stays ignored: `nohup` ignores SIGHUP, and a
    # shell starts background jobs with SIGINT ignored.
    previous = {signum: signal.signal(signum, guard) for signum in _SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    previous_hook = sys.unraisablehook
    deliveries = contextlib.ExitStack()
    if outermost:
        _guard = guard
        deliveries.enter_context(Deliveries(guard.delivered))

        def hook(unraisable: Any) -> None:
            if not guard.redeliver(unraisable):
                previous_hook(unraisable)

        sys.unraisablehook = hook
    try:
        yield
        if outermost and guard.pending is not None:  # a signal that came while starting up
            guard.starting, guard.critical_depth = False, 0
            guard.raise_pending()
    finally:
        if outermost:
            deliveries.close()
            _guard = None
            sys.unraisablehook = previous_hook
        for signum, old in previous.items():
            if outermost:
                signal.signal(signum, old if old is not None else signal.SIG_DFL)
            else:
                signal.signal(signum, guard)


@contextlib.contextmanager
def starting_up() -> Iterator[None]:
    """A signal inside waits for `training_started()` or the end of the block (module docstring)."""
    guard = _guard if _on_main_thread() else None
    if guard is None or guard.starting:
        yield
        return
    guard.starting = True
    try:
        yield
    except BaseException:
        guard.starting = False
        guard.pending = None  # the run ends with this error; no interrupt is left for later
        raise
    guard.starting = False
    guard.raise_pending()


@contextlib.contextmanager
def abortable() -> Iterator[None]:
    """A part of `starting_up()` that cleans up after itself when cut short (starting Ray's servers,
    creating its nodes): a signal that came before or comes inside raises at once, so that a stop keeps
    to its deadline however long the start-up would take."""
    guard = _guard if _on_main_thread() else None
    if guard is None or not guard.starting:
        yield
        return
    guard.starting = False
    try:
        guard.raise_pending()
        yield
    finally:
        guard.starting = True


def stopping_since() -> float | None:
    """When (`time.monotonic()`) the run's first signal came; None before one (or outside the block)."""
    return _guard.first_at if _guard is not None else None


def as_signalled(error: KeyboardInterrupt) -> KeyboardInterrupt:
    """`error` as the run's first signal names it: a library that turns the interrupt raised inside its
    call into a bare `KeyboardInterrupt` (Ray's `ray.get`) would make a SIGTERM exit as Ctrl-C does."""
    signum = _guard.first_signum if _guard is not None else None
    if signum is None or signum == signal.SIGINT or isinstance(error, Interrupted):
        return error
    return Interrupted(signum)


def training_started() -> None:
    """Ends `starting_up()`: a signal that came while the run started is raised now."""
    guard = _guard if _on_main_thread() else None
    if guard is not None:
        guard.starting = False
        guard.raise_pending()


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Defers an interrupt that arrives inside the block to its end.

    A learner step donates its state's buffers to the compiled update: an exception raised inside it
    leaves the learner holding deleted arrays, and the final checkpoint cannot be written. The same
    holds for a replay insert cut in half. The local trainer runs every actor call in this block.
    A block that raises takes its pending signal with it: the run ends with that error.
    """
    guard = _guard if _on_main_thread() else None
    if guard is None:
        yield
        return
    guard.critical_depth += 1
    try:
        yield
    except BaseException:
        guard.critical_depth -= 1
        if not guard.critical_depth:
            guard.pending = None
        raise
    guard.critical_depth -= 1
    guard.raise_pending()


@contextlib.contextmanager
def when_abandoned(callback: Callable[[], None]) -> Iterator[None]:
    """Within the block, a third Ctrl-C (which exits at once) calls `callback` first (e.g. to mark
    run.json "interrupted")."""
    guard = _guard if _on_main_thread() else None
    if guard is None:
        yield
        return
    guard.abandon.append(callback)
    try:
        yield
    finally:
        guard.abandon.remove(callback)


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


def annotate(error: KeyboardInterrupt, env_steps: int, run_dir: object, ended: str | None = None,
             closing: bool = False) -> None:
    """Notes on an interrupt where the run stopped, for the one line `dmpo train` prints: the env
    steps of its newest checkpoint, its folder, and `ended`, the status of a run whose final events
    were all written when the signal was taken (e.g. "finished"): during its final checkpoint, which
    it waited for, or after it, while the run closed (`closing`: e.g. its private Ray cluster stopping)."""
    error.env_steps = int(env_steps)  # type: ignore[attr-defined]
    error.run_dir = str(run_dir)  # type: ignore[attr-defined]
    error.ended = ended  # type: ignore[attr-defined]
    error.closing = closing  # type: ignore[attr-defined]


def message(error: KeyboardInterrupt) -> str:
    """`interrupted at N env steps; resume with: dmpo train --resume RUN` (or less, when the run had
    not started: nothing to resume; or `finished at N env steps ...` when the signal came while the
    final events of a run that reached its budget were written)."""
    steps, run_dir = getattr(error, "env_steps", None), getattr(error, "run_dir", None)
    if steps is None or run_dir is None:
        return "interrupted before training started"
    if getattr(error, "ended", None) is not None:
        name = signal.Signals(int(getattr(error, "signum", signal.SIGINT))).name
        if getattr(error, "closing", False):
            came = "as the run closed, after its final checkpoint was written"
        else:
            came = "while its final checkpoint was written, which it waited for"
        return f"{error.ended} at {steps} env steps, run directory {run_dir} ({name} came {came})"  # type: ignore[attr-defined]
    return f"interrupted at {steps} env steps; resume with: dmpo train --resume {run_dir}"
