"""The driver's side of evaluation rounds: asked for in order, and each row logged reaches it once.

`EvaluationRounds` queues the rounds the schedule finds due and sends them to the evaluator node one
at a time: the next once the previous round's row has reached the driver, because the callbacks act
on each row before the next round begins (a stop they ask for, e.g. `--stop-at-return`, ends the run
after that round, as in one process, and not after every round queued while the row travelled). It
costs at most one monitoring pass of evaluator time per round. A stopping run sends every round
queued at once (a finished run) or drops those not yet sent (an interrupt or a callback's stop).

`EvaluationRows` keeps at most one `rows(start)` call to the evaluator outstanding and never waits for
it during a monitoring pass (`poll()`), so a starting or busy evaluator never slows the driver's
loop; `drain(timeout)` waits, for the last rows when the program stops. Every new row, in order, is
handed to `on_row` with its index — the one place the driver acts on evaluations
(`DistributedProgram._on_evaluation`, through `EvaluationRounds`).
A replaced evaluator node starts again from its first row (`reset`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray


class EvaluationRows:
    """See the module docstring. `evaluator` is the evaluator node's handle (None: no evaluator)."""

    def __init__(self, on_row: Callable[[int, dict[str, Any]], None]) -> None:
        self._on_row = on_row
        self._evaluator: Any = None
        self._seen = 0  # rows of the current evaluator node handed on
        self._pending: Any = None

    def reset(self, evaluator: Any) -> None:
        """Collects from a new evaluator node (a replacement numbers its rows from 0 again)."""
        self._evaluator, self._seen, self._pending = evaluator, 0, None

    def poll(self) -> None:
        """Hands on the rows of an answered call and sends the next one; never waits."""
        if self._evaluator is None:
            return
        if self._pending is not None:
            ready, _ = ray.wait([self._pending], timeout=0)
            if not ready:
                return
            self._take(self._pending, timeout=None)
        self._pending = self._evaluator.rows.remote(self._seen)

    def drain(self, timeout: float) -> None:
        """Waits up to `timeout` seconds for every row logged so far (stopping); quiet if the node is gone."""
        if self._evaluator is None:
            return
        if self._pending is not None:
            self._take(self._pending, timeout)
        try:
            self._take(self._evaluator.rows.remote(self._seen), timeout)
        except Exception:  # the node is already gone
            pass

    def _take(self, ref: Any, timeout: float | None) -> None:
        self._pending = None
        try:
            rows = ray.get(ref, timeout=timeout)
        except Exception:  # a dead evaluator: the program replaces it and calls reset()
            return
        for row in rows:  # one call outstanding at a time: each answer starts where the last one ended
            self._seen += 1
            self._on_row(self._seen - 1, row)


class EvaluationRounds:
    """The rounds asked of the evaluator (module docstring).

    `on_row(index, row)` is the driver's handling of each row; `held()` says whether a callback has
    asked the run to stop (then no further round is sent); `count` is the number of rounds a resumed
    run had asked for already (it is checkpointed), so that each round's index in the run (its
    environment's seed) goes on; `on_request(steps)` tells the run's schedule of each round asked for.
    """

    def __init__(self, on_row: Callable[[int, dict[str, Any]], None], held: Callable[[], bool],
                 count: int = 0, on_request: Callable[[int], None] = lambda steps: None) -> None:
        self._on_row, self._held, self._on_request = on_row, held, on_request
        self.rows = EvaluationRows(self._received)
        self.evaluator: Any = None
        self.count = count  # rounds asked for in the whole run
        self.steps: list[int] = []  # env steps of the rounds asked for since this start, in order
        self.last_step: int | None = None
        self._queue: list[tuple[int, list[Any], int, bool]] = []  # (steps, [variables ref], index, film)
        self._in_flight = 0  # sent to the current evaluator node, its row not back yet
        self._sent = 0  # requests sent to the current evaluator node (they are numbered)

    def attach(self, evaluator: Any) -> None:
        """Rounds go to `evaluator` from now on (a new node numbers its requests and rows from 0)."""
        self.evaluator = evaluator
        self.rows.reset(evaluator)
        self._sent = self._in_flight = 0

    def request(self, steps: int, variables: list[Any] | None = None, film: bool = False) -> None:
        """Queues a round labelled `steps`; `variables`: `[ref]` to the learner's variables of that
        moment (empty or None: the evaluator takes the newest when the round starts); `film`: filmed."""
        if self.evaluator is None:
            return
        self._queue.append((steps, list(variables or []), self.count, film))
        self.count += 1
        self.last_step = steps
        self.steps.append(steps)
        self._on_request(steps)
        self.send()

    def send(self, everything: bool = False) -> None:
        """Sends the next round queued once the previous one's row is back (`everything`: all of them)."""
        while self._queue and self.evaluator is not None and (everything or (
                not self._in_flight and not self._held())):
            steps, variables, index, film = self._queue.pop(0)
            # Numbered: the evaluator is a threaded actor, where Ray may run two calls sent back to
            # back in either order (a stop sends every queued round at once).
            self.evaluator.request.remote(steps, variables, self._sent, index=index, film=film)
            self._sent += 1
            self._in_flight += 1

    def finish(self, send_queued: bool) -> None:
        """Sends the rounds still queued (`send_queued`) or drops them, and tells the evaluator how
        many rounds it has been sent, so that it ends after the last."""
        if self.evaluator is None:
            return
        if send_queued:
            self.send(everything=True)
        self._queue.clear()
        try:
            self.evaluator.finish.remote(self._sent)
        except Exception:  # the node is already gone
            pass

    def _received(self, index: int, row: dict[str, Any]) -> None:
        self._on_row(index, row)
        # A periodic round's row (ProgramOptions.evaluator_period_seconds) also counts: at worst two
        # rounds are then in flight.
        self._in_flight = max(self._in_flight - 1, 0)
        self.send()
