"""A two-node Ray cluster on this machine, run as a script by tests/test_multinode.py.

    python two_node_cluster.py TEMP_DIR

Starts a head node (resource `head`) and a worker node (resource `worker`) with Ray's own
`ray.cluster_utils.Cluster`, every node on 127.0.0.1, in this process's environment (the test hands
it `RAY_AUTH_MODE=token` and the token), prints `ADDRESS <gcs address>`, then obeys one command per
line on stdin:

  kill-worker  prints `KILLED <names of the Ray worker processes on that node>`, then kills the
               worker node's processes without a graceful shutdown (a machine lost)
  add-worker   starts a new worker node with the same resources; prints `ADDED`
  stop         shuts every node down and exits (also on end of input)

A separate process keeps the test's own environment and Ray state untouched by the cluster's token.
"""

from __future__ import annotations

import os
import sys

import psutil
from ray.cluster_utils import Cluster

WORKER = {"node_ip_address": "127.0.0.1", "num_cpus": 2, "resources": {"worker": 4}}


def ray_workers(node) -> list[str]:
    """Process titles (`ray::ActorNode`, ...) of the Ray workers under a node's raylet."""
    names = []
    for process in node.all_processes.get("raylet", ()):
        try:
            for child in psutil.Process(process.process.pid).children(recursive=True):
                name = " ".join(child.cmdline()[:1])
                if name.startswith("ray::"):
                    names.append(name)
        except psutil.Error:
            continue
    return sorted(names)


def main(temp_dir: str) -> None:
    # `Cluster` records the head's address in <system temp>/ray/ray_current_cluster whatever temp_dir
    # says, and fails where that folder does not exist (a fresh machine where Ray never ran with its
    # default folder). Ray's own variable puts that file under this cluster's folder instead.
    os.environ["RAY_TMPDIR"] = temp_dir
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    # A killed node is declared dead after `health_check_failure_threshold` failed checks, one each
    # `health_check_period_ms`: 5 x 3 s by default, 3 x 1 s here, which is what the tests wait for.
    cluster = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": "127.0.0.1", "num_cpus": 1, "include_dashboard": False, "resources": {"head": 2},
        "temp_dir": temp_dir,
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}})
    worker = cluster.add_node(**WORKER)
    print("ADDRESS", cluster.address, flush=True)
    try:
        for line in sys.stdin:
            command = line.strip()
            if command == "kill-worker":
                print("KILLED", " ".join(ray_workers(worker)), flush=True)
                cluster.remove_node(worker, allow_graceful=False)
            elif command == "add-worker":
                worker = cluster.add_node(**WORKER)
                print("ADDED", flush=True)
            elif command == "stop":
                break
    finally:
        cluster.shutdown()
    print("STOPPED", flush=True)


def stop_holder(holder) -> None:
    """Asks the process running this script (`holder`, started with stdin=PIPE) to stop its cluster,
    and kills it if it has not ended within two minutes."""
    import subprocess

    if holder.poll() is None:
        holder.stdin.write("stop\n")
        holder.stdin.flush()
    try:
        holder.wait(timeout=120)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1])
