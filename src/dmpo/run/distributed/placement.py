"""Whether the cluster can hold the program's nodes, checked before they start and watched after.

Every node asks Ray for resources when it is created: the learner a GPU when it uses one plus
`ProgramOptions.learner_resources`, the replay node `replay_resources`, each actor and the evaluator
`actor_resources`. Ray does not refuse a request it cannot meet: the node waits, silently, for a
machine that never comes (and the nodes that need it time out minutes later). So:

* `check_placement` adds up what every node asks for and compares each resource with the cluster's
  total (`ray.cluster_resources()`) before any node starts; a shortfall is a `PlacementError`, one
  line naming the resource, what is asked (by which nodes) and what exists.
* `PendingNodes` watches the nodes once they are started: one that waits for a place while the
  cluster's totals no longer cover the program (a machine was lost, a replacement has nowhere to go)
  is named once, with what it asks for and what the cluster lacks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from dmpo.run.distributed import ray_internals


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
    short = shortfall(demands, cluster)
    if not short:
        return
    resource, (asked, has) = next(iter(short.items()))
    askers = [f"{demand.name if demand.count == 1 else f'{demand.count} {demand.name}s'} "
              f"{_amount(demand.resources[resource] * demand.count)}"
              for demand in demands if demand.resources.get(resource, 0) > 0 and demand.count > 0]
    raise PlacementError(
        f"the Ray cluster cannot hold this run: its nodes ask for {_amount(asked)} {resource!r} in all "
        f"({', '.join(askers)}), the cluster has {_amount(has)}; start its machines with more "
        "(ray start --resources) or ask for less (--actors, --actor-resources, --learner-resources, "
        "--replay-resources)")


def shortfall(demands: list[NodeDemand], cluster: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """{resource: (asked in all, the cluster's total)} for every resource the cluster has too little of."""
    asked: dict[str, float] = {}
    for demand in demands:
        for resource, amount in demand.resources.items():
            if amount > 0 and demand.count > 0:
                asked[resource] = asked.get(resource, 0.0) + amount * demand.count
    has = {resource: float(cluster.get(resource, 0.0)) for resource in asked}
    return {resource: (amount, has[resource]) for resource, amount in sorted(asked.items())
            if amount > has[resource] + 1e-9}


class PendingNodes:
    """Names the nodes that wait for a place the cluster no longer has (a machine was lost).

    `nodes()` returns {node name: (Ray actor handle, resources it asks for)} for the nodes of the
    moment (replacements included); `demands` is what the whole program asks for. `poll()` checks at
    most every `period` seconds and returns one line per node that has waited `report_after` seconds
    while the cluster's total of a resource it asks for is below what the program asks for (each node
    once per wait). A node that is merely starting (its place exists) is never named."""

    def __init__(self, nodes: Callable[[], dict[str, tuple[Any, Mapping[str, float]]]],
                 demands: list[NodeDemand], *, report_after: float = 10.0, period: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nodes = nodes
        self._demands = demands
        self._report_after = report_after
        self._period = period
        self._clock = clock
        self._last_check = -float("inf")
        self._waiting_since: dict[str, tuple[str, float]] = {}  # node -> (actor id, first seen waiting)
        self._reported: set[tuple[str, str]] = set()  # (node, actor id) already named

    def poll(self) -> list[str]:
        import ray

        now = self._clock()
        if now - self._last_check < self._period:
            return []
        self._last_check = now
        short = shortfall(self._demands, ray.cluster_resources())
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
            missing = {key: short[key] for key in resources if key in short}
            if missing and now - since >= self._report_after and (name, actor_id) not in self._reported:
                self._reported.add((name, actor_id))
                lines.append(waiting_line(name, now - since, resources, missing))
        return lines


def waiting_line(name: str, seconds: float, resources: Mapping[str, float],
                 missing: Mapping[str, tuple[float, float]]) -> str:
    """One line: which node waits, for how long, for what, and what the cluster lacks."""
    asks = ", ".join(f"{key!r}: {_amount(value)}" for key, value in sorted(resources.items()))
    lacks = ", ".join(f"{_amount(asked)} {key!r} asked in all, {_amount(has)} in the cluster"
                      for key, (asked, has) in missing.items())
    return (f"the {name} node has waited {seconds:.0f} s for a place on the Ray cluster, which has too "
            f"little for it now ({lacks}; it asks for {asks}): a machine was lost? add one with "
            "`ray start --resources` or stop the run")
