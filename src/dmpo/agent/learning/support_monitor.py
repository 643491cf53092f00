"""A warning, once per run, when the task's returns leave the critic's support.

The learner logs `critic/edge_mass` (share of the projected TD target on the two edge atoms) and
`critic/outside_mass` (share of the unprojected target outside `[vmin, vmax]`, which the projection
clips onto the edges); see `dmpo.agent.losses.support_edge_mass`. The warning looks at the outside mass:
edge atoms may rightly hold mass when returns sit exactly on a bound of the support (zero rewards
with vmin = 0), while mass outside the support is always a return the critic cannot represent.
It fires when that share is above `THRESHOLD` in `ROWS` consecutive logged learner rows.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

THRESHOLD = 0.1
ROWS = 5

_log = logging.getLogger("dmpo")


class SupportMonitor:
    """Watches logged learner rows; warns once, in one line (see `_warn`)."""

    def __init__(self, vmin: float, vmax: float, threshold: float = THRESHOLD, rows: int = ROWS) -> None:
        self.vmin, self.vmax = float(vmin), float(vmax)
        self.threshold, self.rows = threshold, rows
        self._above = 0
        self.warning: str | None = None
        """The warning given, if any."""

    def observe(self, row: dict[str, Any]) -> None:
        value = row.get("critic/outside_mass")
        if value is None or self.warning is not None:
            return
        self._above = self._above + 1 if value > self.threshold else 0
        if self._above >= self.rows:
            self.warning = (
                f"returns exceed the critic's support [{self.vmin:g}, {self.vmax:g}]: "
                f"{100 * value:.0f}% of the TD target's mass fell outside it in {self.rows} logged learner "
                "rows in a row (critic/outside_mass); set --agent.networks.vmin/vmax (or auto)")
            _warn(self.warning)


def _handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers a record of `logger` reaches (its own and its ancestors', while it propagates)."""
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found.extend(current.handlers)
        current = current.parent if current.propagate else None
    return found


def _warn(message: str) -> None:
    """Says `message` once on the terminal: through the `dmpo` logger when the program has a console
    handler for it (Ray's workers, a user's `logging.basicConfig`), else as `dmpo: warning:` on stderr
    and, when the program logs to files only, to those files too."""
    handlers = _handlers(_log)
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    to_console = any(getattr(handler, "stream", None) in consoles for handler in handlers)
    if not to_console:
        print(f"dmpo: warning: {message}", file=sys.stderr, flush=True)
    if handlers:  # without one, logging's last resort would print it to stderr a second time
        _log.warning(message)
