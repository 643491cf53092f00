"""`dmpo train --ray-address` on a real two-node Ray cluster on this machine (docs/distributed.md
"Running on a Ray cluster"): the actors go where `--actor-resources` sends them, losing their node
mid-run costs the run nothing but replacements (the driver names a replacement that waits for a
place), and `--resume` continues it on the same cluster.

The cluster runs in its own process (tests/two_node_cluster.py) with token authentication, every
node on 127.0.0.1; the test checks that every listening socket is on loopback and that no process of
the cluster outlives it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")

import waiting  # noqa: E402
from dmpo.lifecycle.checkpoints import TrainingCheckpoints  # noqa: E402

pytestmark = pytest.mark.ray

DEADLINE = 300.0
EPISODE = 125  # cartpole with action repeat 8
TINY = ["--action-repeat", "8", "--agent.networks.policy-layer-sizes", "8",
        "--agent.networks.critic-layer-sizes", "8", "--agent.networks.num-atoms", "5",
        "--agent.learner.num-samples", "2", "--agent.batch-size", "16", "--agent.min-replay-size", "100",
        "--agent.max-replay-size", "4000", "--agent.samples-per-insert", "16", "--eval-every", "0",
        "--checkpoint-every", "250", "--no-progress"]


class Lines:
    """A process's output lines, read on a thread (so a wait never blocks on a pipe)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(
            target=lambda: [self.lines.put(line) for line in iter(process.stdout.readline, "")], daemon=True)
        self.reader.start()

    def expect(self, prefix: str) -> str:
        def found():
            while not self.lines.empty():
                line = self.lines.get()
                self.seen.append(line)
                if line.startswith(prefix):
                    return line[len(prefix):].strip() or True
            assert self.process.poll() is None, (self.process.returncode, "".join(self.seen)[-4000:])
            return None

        return waiting.wait_for(found, f"{prefix!r} from the cluster process", DEADLINE, 0.2)


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def _listening(processes) -> list[tuple[str, str, int]]:
    found = []
    for process in processes:
        try:
            found.extend((process.name(), c.laddr.ip, c.laddr.port) for c in process.net_connections("inet")
                         if c.status == psutil.CONN_LISTEN)
        except psutil.Error:
            continue
    return found


def test_two_node_cluster_places_actors_survives_losing_their_node_and_resumes(tmp_path):
    token_env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                 "PYTHONUNBUFFERED": "1", "MUJOCO_GL": "egl", "JAX_PLATFORMS": "cpu"}
    token_env.pop("RAY_AUTH_TOKEN_PATH", None)
    # A driver resolves its own address as 127.0.0.1 only with Ray's local-only switch (cluster.py).
    driver_env = {**token_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    # Ray's socket paths must fit in 107 bytes: pytest's tmp_path is too deep for them.
    ray_dir = tempfile.mkdtemp(prefix="dmpo-2n-", dir="/tmp")
    script = str(Path(__file__).with_name("two_node_cluster.py"))
    # The nodes and the driver start in different folders, as `ray start` on another machine does: a
    # relative --run-dir must still gather every node's files in the driver's run folder.
    nodes_cwd, driver_cwd = tmp_path / "nodes", tmp_path / "driver"
    nodes_cwd.mkdir()
    driver_cwd.mkdir()
    holder = subprocess.Popen([sys.executable, script, ray_dir], stdin=subprocess.PIPE, cwd=nodes_cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=token_env)
    output = Lines(holder)
    started: list = []
    train = None
    try:
        address = output.expect("ADDRESS ")
        started = psutil.Process(holder.pid).children(recursive=True)
        sockets = _listening([psutil.Process(holder.pid), *started])
        assert sockets and all(_loopback(ip) for _, ip, _ in sockets), sockets

        run = driver_cwd / "run"
        command = [sys.executable, "-m", "dmpo.cli", "train", "--ray-address", address, "--actors", "2",
                   "--actor-resources", '{"worker": 1}', "--learner-resources", '{"head": 1}',
                   "--replay-resources", '{"head": 1}', *TINY]
        train = subprocess.Popen([*command, "--steps", "2000", "--run-dir", "run"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, env=driver_env, cwd=driver_cwd)
        train_output = Lines(train)

        def checkpointed():  # (a TrainingCheckpoints made before the run would create its folder)
            assert train.poll() is None, "".join(train_output.seen) + _drain(train_output)
            return (run / "checkpoints").is_dir() and TrainingCheckpoints(run / "checkpoints").latest()

        waiting.wait_for(checkpointed, "a first checkpoint", DEADLINE, 0.5)
        checkpoints = TrainingCheckpoints(run / "checkpoints")
        holder.stdin.write("kill-worker\n")
        holder.stdin.flush()
        killed = output.expect("KILLED ")
        # Both actors ran on the worker node (the only one with the resource), learner and replay on the
        # head (the only one with theirs); the counters on the driver's node (the head), whatever
        # node Ray's scheduler would have chosen for an actor that asks for no resource.
        assert killed.count("ray::ActorNode") == 2, killed
        assert "Learner" not in killed and "Replay" not in killed and "Counter" not in killed, killed
        # Their replacements have nowhere to go: the driver names a waiting one within a minute.
        lost_at = time.monotonic()
        waits = train_output.expect("dmpo: warning: the actor ")
        assert time.monotonic() - lost_at < 60, waits
        assert "for a place on the Ray cluster" in waits, waits
        assert "2 'worker' asked in all, 0 in the cluster" in waits, waits
        holder.stdin.write("add-worker\n")
        holder.stdin.flush()
        output.expect("ADDED")
        assert train.wait(timeout=DEADLINE) == 0, _drain(train_output)
        # Ray's report of the lost raylet comes without the raylet's quoted log lines, and once.
        train_output.reader.join(timeout=60)  # every line the run printed, up to its end
        _drain(train_output)
        printed = "".join(train_output.seen)
        assert "[state-dump]" not in printed, printed[-4000:]
        assert printed.count("Raylet is terminated") <= 1, printed[-4000:]
        # One replacement per actor of the lost machine: none is placed on it while it is dying.
        replaced = re.findall(r"actor \d failed .*; a new one takes its place", printed)
        assert len(replaced) == 2, printed[-4000:]
        state = json.loads((checkpoints.latest() / "state.json").read_text())
        assert 2000 <= state["env_steps"] < 2000 + 2 * EPISODE

        # Resumed with the learner on the worker node: losing that machine loses the learner, and with
        # no machine that can hold its replacement within --node-restart-deadline, the run ends
        # `interrupted` at its newest checkpoint and exits 75, for a scheduler to requeue it.
        resume = [*command[:4], "--resume", "run", "--steps", "4000", "--ray-address", address,
                  "--actor-resources", '{"worker": 1}', "--replay-resources", '{"head": 1}', "--no-progress"]
        first = checkpoints.latest()
        train = subprocess.Popen([*resume, "--learner-resources", '{"worker": 1}', "--node-restart-deadline",
                                  "5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=driver_env, cwd=driver_cwd)
        train_output = Lines(train)
        waiting.wait_for(lambda: checkpointed() != first, "a checkpoint of the resumed run", DEADLINE, 0.5)
        holder.stdin.write("kill-worker\n")
        holder.stdin.flush()
        assert "ray::LearnerNode" in output.expect("KILLED ")
        train_output.expect("dmpo: warning: the learner node was lost")
        waits = train_output.expect("dmpo: warning: waiting up to 5 s for the cluster to hold the learner's")
        assert "'worker'" in waits, waits
        assert train.wait(timeout=DEADLINE) == 75, _drain(train_output)
        train_output.reader.join(timeout=60)
        printed = _drain(train_output)
        assert "dmpo: error: the learner node could not be replaced" in printed, printed
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "interrupted" and "could not be replaced" in info["status_reason"], info
        assert [entry["node"] for entry in info["recoveries"]] == ["learner"], (info["recoveries"], printed)
        suspended_at = checkpoints.latest()
        assert suspended_at != first, printed
        assert json.loads((suspended_at / "state.json").read_text())["env_steps"] < 4000
        holder.stdin.write("add-worker\n")
        holder.stdin.flush()
        output.expect("ADDED")

        resumed = subprocess.run([*resume, "--learner-resources", '{"head": 1}'], capture_output=True,
                                 text=True, env=driver_env, timeout=DEADLINE, cwd=driver_cwd)
        assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
        state = json.loads((checkpoints.latest() / "state.json").read_text())
        assert 4000 <= state["env_steps"] < 4000 + 2 * EPISODE
        assert json.loads((run / "run.json").read_text())["status"] == "finished"
        # Every node wrote into the driver's run folder (the actors on the worker node, the learner on
        # the head), nothing under the folder the nodes were started in.
        assert (run / "logs" / "environment_loop" / "logs.csv").is_file(), list((run / "logs").iterdir())
        assert list(nodes_cwd.iterdir()) == [], list(nodes_cwd.rglob("*"))[:20]
    finally:
        if train is not None and train.poll() is None:
            train.kill()
            train.wait(timeout=60)
        from two_node_cluster import stop_holder

        stop_holder(holder)
        gone, alive = psutil.wait_procs([p for p in started if _exists(p)], timeout=60)
        for process in alive:  # only processes this test's cluster started
            process.kill()
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert not alive, alive


def _exists(process) -> bool:
    try:
        return process.is_running()
    except psutil.Error:
        return False


def _drain(lines: Lines) -> str:
    while not lines.lines.empty():
        lines.seen.append(lines.lines.get())
    return "".join(lines.seen)[-4000:]
