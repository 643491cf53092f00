"""Polling helper shared by the tests that wait for other processes or threads."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(condition: Callable[[], Any], what: str, timeout: float, period: float) -> Any:
    """Polls `condition` every `period` seconds; its first truthy value, or AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(period)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
