"""Distributed DMPO on Ray (spec §7): replay, learner, actors, evaluator and counter as Ray actors.

Entry point (what `dmpo train --actors N` calls)::

    run_distributed(config: DMPOConfig, environment: str | factory(is_eval[, seed=]) -> env, *,
                    num_actors: int, run_dir, seed=0, max_actor_steps=None, max_learner_steps=None,
                    ray_address=None, num_cpus=None, network_factory=None, variable_update_period=1000,
                    evaluator_episodes=1, evaluator_period_seconds=10.0, checkpoint_period_seconds=600.0,
                    progress=True, resume=False, options=None, on_poll=None) -> DistributedResult

Modules: `cluster` (local localhost-only cluster or join one), `replay_service` / `replay_client`
(the table node, the bounded writer and the prefetching sample stream), `counter_service` (shared
counts), `variables` (publishing and asynchronously fetching the target policy), `actor`,
`learner_node`, `evaluator` (the nodes), `options` (program settings and result), `program` (start,
monitor, restart, stop).
"""

from dmpo.distributed.cluster import ClusterInfo, ray_cluster, start_local_cluster
from dmpo.distributed.options import DistributedResult, NodeFailure, ProgramOptions
from dmpo.distributed.program import DistributedProgram, run_distributed
from dmpo.distributed.replay_service import make_rate_limiter

__all__ = [
    "ClusterInfo",
    "DistributedProgram",
    "DistributedResult",
    "NodeFailure",
    "ProgramOptions",
    "make_rate_limiter",
    "ray_cluster",
    "run_distributed",
    "start_local_cluster",
]
