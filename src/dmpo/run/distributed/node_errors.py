"""What a node's error says, as the driver reports it, and which errors are worth a restart.

Ray hands the driver an exception raised inside a node as a `RayTaskError` that wraps the original
and whose message starts with the remote call's name in terminal colour codes; `node_error` gives back
the original exception (its type and message), and `describe` the one line the console and run.json
show. Ray's own errors about lost processes and nodes are transient: a replacement may well work.
An exception the node's own code raised is not, once a replacement has raised it again:
`RepeatedFailures` says when a node has failed the same way twice in a row.
"""

from __future__ import annotations

import re

import ray

_COLOUR_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBERS = re.compile(r"\d+(\.\d+)?")


def without_colour(text: str) -> str:
    """`text` without terminal escape sequences."""
    return _COLOUR_CODES.sub("", text)


def node_error(error: BaseException) -> BaseException:
    """The exception the node's own code raised, or `error` itself when Ray raised it (a lost node)."""
    seen = 0
    while isinstance(error, ray.exceptions.RayTaskError) and seen < 8:  # nested remote calls
        cause = getattr(error, "cause", None)
        if not isinstance(cause, BaseException):
            break
        error, seen = cause, seen + 1
    return error


def describe(error: BaseException) -> str:
    """`Type: first line of the message` of the node's own exception, without colour codes."""
    original = node_error(error)
    lines = without_colour(str(original)).strip().splitlines()
    return f"{type(original).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def is_transient(error: BaseException) -> bool:
    """True for Ray's errors about processes, nodes and objects that went away (worth a replacement);
    False for an exception the node's code raised."""
    original = node_error(error)
    # Ray stands a bare RayError in for an exception it could not bring back (unpicklable): the
    # node's own fault, not a lost process.
    return isinstance(original, ray.exceptions.RayError) and type(original) is not ray.exceptions.RayError


def remote_traceback(error: BaseException) -> str:
    """The node's traceback as Ray reported it, without colour codes ('' when there is none)."""
    return without_colour(str(error)).strip() if isinstance(error, ray.exceptions.RayTaskError) else ""


class RepeatedFailures:
    """Remembers how each node (by name) last failed; `repeated` is True when a node's failure is the
    same as its previous one (same exception type and message, numbers aside: a NaN at another step
    of a new seed's episode is the same fault) and neither was transient."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, str] | None] = {}

    def repeated(self, node: str, error: BaseException) -> bool:
        if is_transient(error):
            self._last[node] = None  # a lost node breaks the row: the next failure starts a new one
            return False
        original = node_error(error)
        signature = (type(original).__name__, _NUMBERS.sub("#", without_colour(str(original)).strip()))
        previous = self._last.get(node)
        self._last[node] = signature
        return previous == signature
