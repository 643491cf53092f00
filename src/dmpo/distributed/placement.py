"""Whether the cluster can hold the program's nodes, checked before they start and watched after.

Every node asks Ray for resources when it is created: the learner a GPU when it uses one plus
`ProgramOptions.learner_resources`, the replay node `replay_resources`, each actor and the evaluator
`actor_resources`. Ray does not refuse a request it cannot meet: the node waits, silently, for a
machine that never comes (and the nodes that need it time out minutes later). So:

* `check_placement` adds up what every node asks for and compares each resource with the cluster's
  total (`ray.cluster_resources()`) before any node starts; a shortfall is a `PlacementError`, one
  line naming the resource, what is asked (by which nodes) and what exists.
* `PendingNodes` watches the nodes once they are started: one that still waits for a place after
  `report_after` seconds (its machine was lost, a replacement has nowhere to go) is named once, with
  what it asks for and what the cluster has now.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from dmpo.distributed import ray_internals


class PlacementError(RuntimeError):
    """The cluster cannot hold every node of the program at once."""


@dataclasses.dataclass(frozen=True)
class NodeDemand:
    """What one kind of node asks Ray for, and how many of them the program starts."""

    name: str
    resources: Mapping[str, float]
    count: int = 1


def program_demands(*, actors: int, evaluator: bool, use_gpu: bool, options: Any) -> list[NodeDemand]:
    """The program's nodes and what each asks for (`options`: a `ProgramOptions`). The nodes ask for
    no CPU (`num_cpus=0`: they share the machine's cores); the counter has no resources."""
    actor = dict(options.actor_resources or {})
    learner = {**(options.learner_resources or {}), **({"GPU": 1.0} if use_gpu else {})}
    demands = [NodeDemand("learner", learner),
               NodeDemand("replay", dict(options.replay_resources or {})),
               NodeDemand("actor", actor, actors)]
    if evaluator:
        demands.append(NodeDemand("evaluator", actor))
    return demands


def _amount(value: float) -> str:
    return f"{value:g}"


def check_placement(demands: list[NodeDemand], cluster: Mapping[str, float]) -> None:
    """Raises `PlacementError` unless the cluster's totals cover what all `demands` ask for at once."""
    asked: dict[str, float] = {}
    askers: dict[str, list[str]] = {}
    for demand in demands:
        for resource, amount in demand.resources.items():
            if amount <= 0 or demand.count <= 0:
                continue
            asked[resource] = asked.get(resource, 0.0) + amount * demand.count
            label = demand.name if demand.count == 1 else f"{demand.count} {demand.name}s"
            askers.setdefault(resource, []).append(f"{label} {_amount(amount * demand.count)}")
    for resource in sorted(asked):
        has = float(cluster.get(resource, 0.0))
        if asked[resource] > has + 1e-9:
            raise PlacementError(
                f"the Ray cluster cannot hold this run: its nodes ask for {_amount(asked[resource])} "
                f"{resource!r} in all ({', '.join(askers[resource])}), the cluster has {_amount(has)}; "
                f"start its machines with more (ray start --resources) or ask for less "
                f"(--actors, --actor-resources, --learner-resources, --replay-resources)")


class PendingNodes:
    """Names the nodes that wait for a place on the cluster longer than `report_after` seconds.

    `nodes()` returns {node name: (Ray actor handle, resources it asks for)} for the nodes of the
    moment (replacements included); `poll()` returns the new report lines (each node once per wait),
    checking at most every `period` seconds."""

    def __init__(self, nodes: Callable[[], dict[str, tuple[Any, Mapping[str, float]]]], *,
                 report_after: float = 30.0, period: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nodes = nodes
        self._report_after = report_after
        self._period = period
        self._clock = clock
        self._last_check = -float("inf")
        self._waiting_since: dict[str, tuple[str, float]] = {}  # node -> (actor id, first seen waiting)
        self._reported: set[tuple[str, str]] = set()  # (node, actor id) already named

    def poll(self) -> list[str]:
        now = self._clock()
        if now - self._last_check < self._period:
            return []
        self._last_check = now
        lines = []
        for name, (handle, resources) in self._nodes().items():
            if handle is None:
                continue
            actor_id = ray_internals.actor_id(handle)
            if ray_internals.actor_state(actor_id) not in ray_internals.WAITING_STATES:
                self._waiting_since.pop(name, None)
                continue
            seen_id, since = self._waiting_since.setdefault(name, (actor_id, now))
            if seen_id != actor_id:  # a new node under the same name: its wait starts now
                self._waiting_since[name] = (actor_id, now)
                continue
            if now - since >= self._report_after and (name, actor_id) not in self._reported:
                self._reported.add((name, actor_id))
                lines.append(waiting_line(name, now - since, resources))
        return lines


def waiting_line(name: str, seconds: float, resources: Mapping[str, float]) -> str:
    """One line: which node waits, for how long, what it asks for and what the cluster has now."""
    import ray

    total, free = ray.cluster_resources(), ray.available_resources()
    asks = ", ".join(f"{key!r}: {_amount(value)} (the cluster has {_amount(total.get(key, 0.0))}, "
                     f"{_amount(free.get(key, 0.0))} free)"
                     for key, value in sorted(resources.items()) if value > 0)
    return (f"the {name} node has waited {seconds:.0f} s for a place on the Ray cluster"
            + (f"; it asks for {asks}" if asks else "")
            + "; a machine with those resources was lost or is busy: add one (ray start) or stop the run")
