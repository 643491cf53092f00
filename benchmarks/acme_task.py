"""Run the Acme peer's bench.py on another dm_control task.

The peer script (`../shared/acme_peer/bench.py`) builds cartpole-swingup from two module globals,
DOMAIN and TASK; its networks and agent arguments are those of the reference's control-suite launcher,
which does not change them per task. This wrapper, run with the peer venv's python, loads the script,
sets those two globals and hands it the rest of the command line:

    PEER_PY acme_task.py PEER_SCRIPT walker-walk train --steps 500000 --seed 0

It imports nothing from dmpo, so the peer venv needs nothing more.
"""
from __future__ import annotations

import importlib.util
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3 or "-" not in argv[1]:
        sys.exit("usage: acme_task.py PEER_SCRIPT DOMAIN-TASK SUBCOMMAND [ARGS...]")
    script, task, rest = argv[0], argv[1], argv[2:]
    domain, task_name = task.split("-", 1)
    spec = importlib.util.spec_from_file_location("acme_peer_bench", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.DOMAIN, bench.TASK = domain, task_name
    print(f"[acme_task] {script} on {domain}-{task_name}", flush=True)
    bench.main(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
