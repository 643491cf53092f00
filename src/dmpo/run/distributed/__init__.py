"""Distributed DMPO on Ray (algorithm.md §7): replay, learner, actors, evaluator and counter as Ray actors.

This is the Ray executor of a `Run` (`dmpo.run.run`); the public entry points are in `dmpo.distributed`
(`run_distributed`, and the names users need from here).

Every node builds its parts with the one `dmpo.agent.builder.DMPOBuilder` the driver hands it.

Modules: `cluster` (local localhost-only cluster or join one), `replay_service` / `replay_client`
(the table node, the bounded writer and the prefetching sample stream), `counter_service` (shared
counts), `variables` (publishing and asynchronously fetching the target policy), `actor`,
`learner_node`, `evaluator` (the nodes), `evaluations` (the driver collecting evaluation rows),
`options` (program settings and result), `placement` (can the cluster hold every node),
`node_errors` (a node's own exception, and when not to restart it), `program` (start, monitor,
restart, stop), `executor` (`RayExecutor`: the cluster and the driver's loop around a program), `reaper`
(what stops a private cluster whose driver died outright).
"""
