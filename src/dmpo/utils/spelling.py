"""Closest-match suggestions for a mistyped name (a flag, a task): "did you mean --steps?".

Ranked by edit distance (Levenshtein: insertions, deletions and substitutions each cost 1), so the
name one keystroke away comes first; a dotted name (`--agent.batch-size`) is also compared by its last
part (`--batch-size`), one step dearer, so that a flag typed without its group still finds it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest", "edit_distance"]


def edit_distance(a: str, b: str) -> int:
    """The Levenshtein distance between `a` and `b`."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def _distance(typed: str, name: str, separator: str | None) -> int:
    whole = edit_distance(typed, name)
    if separator and separator in name:
        dashes = len(name) - len(name.lstrip("-"))
        last = name[:dashes] + name.rpartition(separator)[2]
        return min(whole, edit_distance(typed, last) + 1)
    return whole


def closest(typed: str, names: Iterable[str], *, limit: int = 3, separator: str | None = None) -> list[str]:
    """Up to `limit` of `names` nearest to `typed`, nearest first (ties in the order given), keeping
    only those within a third of the typed name's length (at least 2 edits): beyond that a
    suggestion is a guess."""
    budget = max(2, len(typed.lstrip("-")) // 3)
    scored = [(_distance(typed, name, separator), index, name) for index, name in enumerate(names)]
    return [name for distance, _, name in sorted(scored) if distance <= budget][:limit]
