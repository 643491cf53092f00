"""Every delivery of a signal, counted even when Python runs its handler once for several.

CPython runs a signal's Python handler in the main thread at its next check, and a signal delivered
again before that check runs it only once: a main thread held in a C call (Ray's `ray.get` checks for
signals about once a second) turns a second and a third Ctrl-C 0.5 s apart into one handler call, and
the third, which must exit at once, is lost. CPython's C handler writes one byte per delivery to the
wakeup fd (`signal.set_wakeup_fd`), whatever the main thread does: `Deliveries` reads them on a thread
of its own and reports each (`dmpo.lifecycle.interrupts` counts Ctrl-Cs with it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Deliveries"]


class Deliveries:
    """Within the block (entered in the main thread), `on_delivery(signum)` is called on a thread of its
    own for every delivery of a signal whose handler is a Python function; a wakeup fd set before is
    still written to."""

    def __init__(self, on_delivery: Callable[[int], None]) -> None:
        self._on_delivery = on_delivery
        self._previous = -1
        self._fds: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Deliveries:
        read, write = os.pipe()
        os.set_blocking(write, False)  # the C handler must never block
        try:
            self._previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread, or not allowed here: no counting
            os.close(read)
            os.close(write)
            return self
        self._fds = (read, write)
        self._thread = threading.Thread(target=self._read, args=(read,), name="dmpo-signals", daemon=True)
        self._thread.start()
        return self

    def _read(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            if self._previous >= 0:  # e.g. an event loop's
                with contextlib.suppress(OSError):
                    os.write(self._previous, data)
            for signum in data:
                self._on_delivery(signum)

    def __exit__(self, *exc: Any) -> None:
        if self._fds is None:
            return
        read, write = self._fds
        self._fds = None
        signal.set_wakeup_fd(self._previous)
        os.close(write)  # the reader sees the end
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        os.close(read)
