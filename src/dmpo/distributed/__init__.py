"""Distributed DMPO on Ray (algorithm.md §7): replay, learner, actors, evaluator and counter as Ray actors.

Entry point (what `dmpo train --actors N` calls)::

    run_distributed(config: TrainConfig, run_dir, *, env_factory=None, network_factory=None,
                    options=None, ray_address=None, num_cpus=None, progress=True, resume=False,
                    on_poll=None, callbacks=(), keep_ray_logs=False) -> DistributedResult

Every node builds its parts with the one `dmpo.agent.builder.DMPOBuilder` the driver hands it.

Modules: `cluster` (local localhost-only cluster or join one), `replay_service` / `replay_client`
(the table node, the bounded writer and the prefetching sample stream), `counter_service` (shared
counts), `variables` (publishing and asynchronously fetching the target policy), `actor`,
`learner_node`, `evaluator` (the nodes), `evaluations` (the driver collecting evaluation rows),
`options` (program settings and result), `placement` (can the cluster hold every node),
`node_errors` (a node's own exception, and when not to restart it), `program` (start, monitor,
restart, stop), `driver` (`run_distributed`: the loop around a program).
"""

from dmpo.distributed.cluster import ClusterInfo, ray_cluster, start_local_cluster
from dmpo.distributed.driver import run_distributed
from dmpo.distributed.options import DistributedResult, NodeFailure, ProgramOptions
from dmpo.distributed.placement import PlacementError
from dmpo.distributed.program import DistributedProgram

__all__ = [
    "ClusterInfo",
    "DistributedProgram",
    "DistributedResult",
    "NodeFailure",
    "PlacementError",
    "ProgramOptions",
    "ray_cluster",
    "run_distributed",
    "start_local_cluster",
]
