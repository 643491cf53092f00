"""The multi-node commands of docs/distributed.md ("Running on a Ray cluster") run as written, on a
two-node cluster on this machine (HEAD_IP = MY_IP = 127.0.0.1): the doc's code block is read from the
page and run by bash. Only the environment is the test's: HOME (so the doc's token goes to a fresh
~/.ray), RAY_TMPDIR (so the nodes' session files stay in the test's folder), and `dmpo` on PATH is a
wrapper that adds the flags of a tiny run (small networks, 300 steps) to the doc's own.
Then the layout of the old example (learner and replay asking for the head's one unit) is refused
within a minute in one line naming the resource, before any node starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "distributed.md"
TINY = ["--action-repeat", "8", "--agent.networks.policy-layer-sizes", "8",
        "--agent.networks.critic-layer-sizes", "8", "--agent.networks.num-atoms", "5",
        "--agent.learner.num-samples", "2", "--agent.batch-size", "16", "--agent.min-replay-size", "100",
        "--agent.max-replay-size", "4000", "--agent.samples-per-insert", "16", "--eval-episodes", "1",
        "--steps", "300", "--no-progress"]
TIMEOUT = 480


def multi_node_block() -> str:
    """The doc's code block that starts a head node."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    [block] = [block for block in blocks if "ray start --head" in block]
    return block


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def cluster_processes(folder: str) -> list[psutil.Process]:
    """The processes of the cluster whose session files are under `folder` (nobody else's)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(folder in part for part in process.info["cmdline"] or ()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_the_docs_multi_node_commands_run_as_written(tmp_path):
    if port_in_use(6379):
        pytest.skip("port 6379 (the doc's head port) is in use on this machine")
    block = multi_node_block()
    # Ray's socket paths must fit in 107 bytes: pytest's tmp_path is too deep for them.
    ray_dir = tempfile.mkdtemp(prefix="dd", dir="/tmp")
    home, tools, work = tmp_path / "home", tmp_path / "bin", tmp_path / "work"
    for folder in (home, tools, work):
        folder.mkdir()
    wrapper = tools / "dmpo"  # the CLI of this checkout, with the tiny run's flags after the doc's
    # A driver resolves its own address as 127.0.0.1 only with Ray's local-only switch (cluster.py).
    wrapper.write_text(f"#!/bin/sh\nRAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 exec {sys.executable} -m dmpo.cli "
                       f"\"$@\" {' '.join(TINY)}\n")
    wrapper.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(HOME=str(home), RAY_TMPDIR=ray_dir, HEAD_IP="127.0.0.1", MY_IP="127.0.0.1",
               PATH=os.pathsep.join([str(tools), str(Path(sys.executable).parent), env.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]),
               JAX_PLATFORMS="cpu", MUJOCO_GL="egl", PYTHONUNBUFFERED="1")
    try:
        ran = subprocess.run(["bash", "-e", "-c", block], cwd=work, env=env, capture_output=True, text=True,
                             timeout=TIMEOUT)
        output = ran.stdout + ran.stderr
        assert ran.returncode == 0, output[-6000:]
        token = home / ".ray" / "auth_token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) == 64
        assert "finished: " in ran.stdout, output[-4000:]
        assert (work / "runs" / "cluster-example" / "run.json").is_file()

        # The old example's layout on the same cluster: both nodes ask for the head's one `learner_node`.
        started = time.monotonic()
        refused = subprocess.run(
            ["dmpo", "train", "--ray-address", "127.0.0.1:6379", "--actors", "1", "--actor-resources",
             '{"worker": 1}', "--learner-resources", '{"learner_node": 1}', "--replay-resources",
             '{"learner_node": 1}', "--run-dir", "runs/old-example"],
            cwd=work, env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True, timeout=TIMEOUT)
        errors = [line for line in refused.stderr.splitlines() if line.startswith("dmpo: error:")]
        assert refused.returncode == 2 and len(errors) == 1, refused.stdout[-2000:] + refused.stderr[-3000:]
        assert "2 'learner_node' in all (learner 1, replay 1), the cluster has 1" in errors[0], errors
        assert time.monotonic() - started < 60
        run = json.loads((work / "runs" / "old-example" / "run.json").read_text())
        assert run["status"] == "failed" and run["status_reason"].startswith("PlacementError: "), run
    finally:
        processes = cluster_processes(ray_dir)
        for process in processes:  # only this test's cluster: its processes name its folder
            try:
                process.terminate()
            except psutil.Error:
                pass
        # Some of the nodes' processes outlive a SIGTERM (4 of 7 were still there after 30 s): a short
        # grace, then SIGKILL, and the folder goes once they are gone.
        _, alive = psutil.wait_procs(processes, timeout=5)
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=30)
        shutil.rmtree(ray_dir, ignore_errors=True)
