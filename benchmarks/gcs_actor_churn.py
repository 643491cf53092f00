"""Ray's GCS server's memory as actors are created and destroyed, as a distributed run's recoveries do.

Usage: .venv/bin/python benchmarks/gcs_actor_churn.py OUT [--cycles 200] [--actors 4] [--arg-kib 80]
       .venv/bin/python benchmarks/gcs_actor_churn.py --summarise OUT/summary.json   (the table again)

Starts a private local Ray cluster (dmpo's `start_local_cluster`, 2 CPUs, task events off on the
actors as on dmpo's nodes) and, `--cycles` times, kills `--actors` actors with `ray.kill` and starts
as many new ones, each given a `--arg-kib` argument (inlined into the actor's creation spec, as the
nodes' settings are). Records the `gcs_server`'s RSS after each cycle; `summary.json` holds it, and
the table gives the growth after every quarter of the cycles. A recovery of a distributed run starts
every node of the program again (8 actors with `--actors 4`), so the chaos soak's 11 recoveries and 12
replacements destroyed about 100 actors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def gcs_rss_mib() -> float:
    import psutil

    for process in psutil.process_iter(["name"]):
        if process.info["name"] == "gcs_server":
            return process.memory_info().rss / 2**20
    raise RuntimeError("no gcs_server process")


def churn(cycles: int, actors: int, arg_kib: int) -> list[list[float]]:
    import ray

    from dmpo.run.distributed.cluster import start_local_cluster, stop_local_cluster
    from dmpo.run.distributed.common import NODE_OPTIONS

    class Node:
        def __init__(self, settings: bytes) -> None:
            self.size = len(settings)

        def ready(self) -> int:
            return self.size

    remote = ray.remote(num_cpus=0, max_restarts=0, **NODE_OPTIONS)(Node)
    settings = os.urandom(arg_kib * 1024)
    start_local_cluster(num_cpus=2)
    try:
        live = [remote.remote(settings) for _ in range(actors)]
        ray.get([node.ready.remote() for node in live])
        time.sleep(2.0)
        rows = [[0, round(gcs_rss_mib(), 2)]]
        for cycle in range(1, cycles + 1):
            for node in live:
                ray.kill(node)
            live = [remote.remote(settings) for _ in range(actors)]
            ray.get([node.ready.remote() for node in live])
            rows.append([cycle * actors, round(gcs_rss_mib(), 2)])
        return rows
    finally:
        stop_local_cluster()


def table(summary: dict[str, Any]) -> str:
    rows = summary["rss"]
    base = rows[0][1]
    marks = sorted({rows[len(rows) * quarter // 4 - (quarter == 4)][0] for quarter in range(1, 5)})
    lines = ["| actors destroyed | gcs_server RSS (MiB) | growth since the start (MiB) |", "|---:|---:|---:|",
             f"| 0 | {base:.1f} | 0.0 |"]
    for destroyed, rss in rows:
        if destroyed in marks:
            lines.append(f"| {destroyed} | {rss:.1f} | {rss - base:+.1f} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--summarise"]:
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--arg-kib", type=int, default=80)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    rows = churn(args.cycles, args.actors, args.arg_kib)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "machine": f"{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f}",
               "seconds": round(time.time() - started, 1), "args": {k: str(v) for k, v in vars(args).items()},
               "rss": rows}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(table(summary))


if __name__ == "__main__":
    main()
