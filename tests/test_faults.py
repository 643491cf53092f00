"""Fault injection: kill -9 at random moments across checkpoint writes, a corrupt newest checkpoint,
a failing learner thread, and killed nodes of the distributed program.

The checkpoint writer's kill times come from a seeded RNG; the trainer's kills are placed by what its
run folder shows (a write under way, a checkpoint just renamed into place). Each kill is printed
(`pytest -s` shows them); the trial counts and outcomes are recorded in docs/results/reliability.md.
Everything runs in subprocesses, so that a hang fails a test at its timeout instead of stopping the
suite.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import waiting
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from dmpo.replay import Table
from dmpo.utils.checkpointing import find_checkpoint_file, verify_checkpoint_file

SEED = 20261203
TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2", "--agent.batch-size", "16",
        "--agent.min-replay-size", "100", "--agent.max-replay-size", "2000",
        "--agent.samples-per-insert", "16"]


def child_env(**extra: str) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
           "JAX_PLATFORMS": "cpu", "MUJOCO_GL": "egl", "PYTHONUNBUFFERED": "1",
           "JAX_COMPILATION_CACHE_DIR": os.environ.get(
               "DMPO_TEST_JAX_CACHE", str(Path.home() / ".cache" / "dmpo-test-xla")),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5"}
    env.update(extra)
    return env



def wait_for(condition, what: str, timeout: float = 120.0, period: float = 0.005):
    return waiting.wait_for(condition, what, timeout, period)


def in_progress(directory: Path) -> bool:
    """A checkpoint write was under way: its temporary folder or file exists."""
    while True:
        try:
            return directory.is_dir() and (any(directory.glob(".step_*")) or
                                           any(directory.glob("*/learner/.*.tmp")))
        except FileNotFoundError:  # a running trainer pruned a folder while it was listed: look again
            continue


# ------------------------------------------------------------ kill -9 across checkpoint writes (20+)

# A writer that saves what the trainer saves (a learner pytree in a checkpoint file, a replay Table,
# state.json) every 100 "steps", continuing from the newest checkpoint, with contents that are a
# function of the step, so that what survives a kill can be checked exactly.
_WRITER = """
import sys
import numpy as np
from dm_env import specs
from dmpo.replay import MinSize, Table
from dmpo.lifecycle.checkpoints import TrainingCheckpoints

def learner_state(step):
    rng = np.random.default_rng(step)
    return {"w": rng.normal(size=(256, 256)).astype(np.float32), "step": np.asarray(step, np.int64)}

checkpoints = TrainingCheckpoints(sys.argv[1], keep=2)
table = Table({"x": specs.Array((64,), np.float32)}, 4096, MinSize(1), seed=0)
latest = checkpoints.latest()
step = 0
if latest is not None:
    step = checkpoints.load(latest, learner_state(0))[1]["env_steps"]
    table.load(latest / "replay.npz")
print("ready", step, flush=True)
while True:
    for k in range(100):
        table.insert({"x": np.full((64,), step + k, np.float32)})
    step += 100
    checkpoints.save(step, learner_state(step), {"env_steps": step, "learner_steps": step // 2}, table)
    print("saved", step, flush=True)
"""


def expected_learner_state(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {"w": rng.normal(size=(256, 256)).astype(np.float32), "step": np.asarray(step, np.int64)}


def check_checkpoint(path: Path) -> int:
    learner, state, replay = TrainingCheckpoints.load(path, expected_learner_state(0))
    step = state["env_steps"]
    want = expected_learner_state(step)
    np.testing.assert_array_equal(learner["w"], want["w"])
    assert int(learner["step"]) == step
    stats = Table.restore(replay).stats()
    assert stats.inserts == step and stats.size == min(step, 4096)
    items = Table.restore(replay).get(np.arange(max(0, step - 4096), step))
    np.testing.assert_array_equal(items["x"][:, 0], np.arange(max(0, step - 4096), step, dtype=np.float32))
    return step


def kill_writer(directory: Path, delay: float) -> list[str]:
    """Starts the writer, kills it with SIGKILL `delay` seconds after its first save; its output."""
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(directory)], stdout=subprocess.PIPE,
                              text=True, env=child_env())
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(writer.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(line.startswith("saved") for line in lines) or writer.poll() is not None,
                 "the writer's first save")
        assert writer.poll() is None, "".join(lines)
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
    reader.join(10)
    return lines


def test_kill_9_across_checkpoint_writes_always_leaves_an_exact_checkpoint(tmp_path):
    rng = np.random.default_rng(SEED)
    directory = tmp_path / "checkpoints"
    # About three kills in four land inside a write (18 of 24 when measured): 12 cover the write's
    # stages (learner file, replay file, state.json, rename, pruning) and the gaps between writes.
    trials, mid_write, last_announced = 12, 0, 0
    for trial in range(trials):
        delay = float(rng.uniform(0.0, 0.25))  # a few saves long: lands inside and between writes
        lines = kill_writer(directory, delay)
        hit = in_progress(directory)
        mid_write += hit
        # Only whole lines count: the kill can cut the last one short ("saved" without its step).
        announced = [int(m.group(1)) for line in lines if (m := re.fullmatch(r"saved (\d+)\n", line))]
        last_announced = max([last_announced, *announced])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a kill must never leave a checkpoint that fails to verify
            checkpoints = TrainingCheckpoints(directory, keep=2)  # removes the half-written folder
            latest = checkpoints.latest()
        assert latest is not None
        step = check_checkpoint(latest)
        assert step >= last_announced  # no completed checkpoint was lost
        # keep + 1 when killed between the rename of a new one and the pruning of the oldest
        assert len(checkpoints.paths()) <= 3 and not in_progress(directory)
        print(f"trial {trial}: kill after {delay * 1000:.0f} ms, mid-write {hit}, latest step {step}")
    print(f"kill -9 trials: {trials}, mid-write {mid_write}, all left an exact loadable checkpoint")
    assert mid_write >= 1, "no kill landed inside a checkpoint write"


# ------------------------------------------------- kill -9 of `dmpo train`, then an exact resume

# Three kills, each at a different moment of a checkpoint's life, chosen by what the run folder shows
# (not by a clock). They leave the run at step 400 (800 if every write outran its signal), so 1,000
# steps leave the last resume work to do after it falls back past a damaged newest checkpoint.
TRAIN_STEPS = 1000
TRAIN = [sys.executable, "-m", "dmpo.cli", "train", "--env", "gym:Pendulum-v1", "--steps", str(TRAIN_STEPS),
         "--eval-every", "0", "--checkpoint-every", "200", "--keep-checkpoints", "2", "--no-progress", *TINY]
# (moment, which checkpoint write of the launch):
#   inside 2: the 2nd write of a fresh run is under way; the 1st must survive, loadable.
#   after 1:  the resumed run's 1st new checkpoint was just renamed into place; it must be kept.
#   inside 1: the first write after a resume is under way; the checkpoint resumed from must survive.
KILLS = (("inside", 2), ("after", 1), ("inside", 1))


def final_learner_digest(run: Path) -> tuple[int, str]:
    latest = TrainingCheckpoints(run / "checkpoints").latest()
    header = verify_checkpoint_file(find_checkpoint_file(latest / "learner"))
    return header["metadata"]["env_steps"], header["payload_sha256"]


def complete_checkpoints(directory: Path) -> list[str]:
    """Names of the renamed-into-place checkpoint folders (looked at without TrainingCheckpoints,
    whose opening removes a write's leftovers)."""
    return sorted(p.name for p in directory.glob("step_*")) if directory.is_dir() else []


def kill_trainer(command: list[str], checkpoints: Path, moment: str, write: int) -> list[str]:
    """Starts `dmpo train` and SIGKILLs it at `moment` ("inside" or "after") of its `write`-th
    checkpoint write; returns the complete checkpoints seen just before the kill."""
    trainer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=child_env())
    start = complete_checkpoints(checkpoints)

    def written() -> int:  # checkpoints this launch completed
        return sum(1 for name in complete_checkpoints(checkpoints) if not start or name > start[-1])

    try:
        if moment == "after":
            wait_for(lambda: written() >= write or trainer.poll() is not None, f"checkpoint {write}",
                     period=0.0005)
        else:
            wait_for(lambda: (written() >= write - 1 and in_progress(checkpoints))
                     or trainer.poll() is not None, f"checkpoint write {write}", period=0.0005)
        assert trainer.poll() is None, trainer.stderr.read()[-3000:]
        complete = complete_checkpoints(checkpoints)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(30)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(30)
    return complete


def test_kill_9_of_the_trainer_then_resume_repeats_the_uninterrupted_run(tmp_path):
    # The uninterrupted run trains beside the kill loop (whose launches spend most of their time
    # starting up, one core's worth): it is only compared at the end.
    reference_log = open(tmp_path / "reference.err", "w")  # noqa: SIM115 (closed below)
    reference = subprocess.Popen([*TRAIN, "--run-dir", str(tmp_path / "reference")],
                                 stdout=subprocess.DEVNULL, stderr=reference_log, env=child_env())
    try:
        run = tmp_path / "killed"
        checkpoints = run / "checkpoints"
        command = [*TRAIN, "--run-dir", str(run)]
        outcomes = []
        for moment, write in KILLS:
            complete = kill_trainer(command, checkpoints, moment, write)
            hit = in_progress(checkpoints)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a kill must never leave a checkpoint that fails to verify
                latest = TrainingCheckpoints(checkpoints).latest()  # removes the half-written folder
            assert latest is not None and not in_progress(checkpoints), (moment, write, complete)
            # Nothing completed before the kill is lost (the newest may be one the kill did not stop).
            assert latest.name >= complete[-1], (moment, write, complete, latest.name)
            outcomes.append((moment, write, hit, latest.name))
            print(f"trainer killed {moment} write {write}: mid-write {hit}, latest {latest.name}")
            command = [*TRAIN[:4], "--resume", str(run), "--no-progress"]
        # A kill aimed inside a write lands there unless the write outran the signal.
        assert any(hit for moment, _, hit, _ in outcomes if moment == "inside"), outcomes
        # The newest checkpoint is damaged on top: the resume must fall back and still end exactly.
        assert len(TrainingCheckpoints(checkpoints).paths()) >= 2, outcomes
        newest = TrainingCheckpoints(checkpoints).paths()[-1]
        (learner_file,) = (newest / "learner").glob("*.ckpt")
        learner_file.write_bytes(learner_file.read_bytes()[:-7])
        resumed = subprocess.run([*TRAIN[:4], "--resume", str(run), "--no-progress"], capture_output=True,
                                 text=True, timeout=600, env=child_env())
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"skipping unusable checkpoint {newest}" in " ".join(resumed.stderr.split())
        assert f"finished: {TRAIN_STEPS} env steps" in resumed.stdout
        assert reference.wait(timeout=600) == 0, (tmp_path / "reference.err").read_text()[-3000:]
        assert final_learner_digest(run) == final_learner_digest(tmp_path / "reference")
        print("trainer kill trials:", outcomes)
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait(timeout=60)  # reaped, so no process outlives the test
        reference_log.close()


# ------------------------------------------------------------------------- a failing learner thread

_FAILING_LEARNER = """
import sys
from dmpo.agent.learning import learner
real_step = learner.Learner.step
calls = [0]

def failing_step(self):
    calls[0] += 1
    if calls[0] == 40:
        raise FloatingPointError("injected learner failure")
    return real_step(self)

learner.Learner.step = failing_step
from dmpo.cli.main import main
main(sys.argv[1:])
"""


def test_a_failing_learner_thread_stops_the_run_with_its_error_and_keeps_the_checkpoints(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--env", "gym:Pendulum-v1", "--steps", "100000", "--eval-every", "0",
            "--checkpoint-every", "200", "--overlap-learner", "--no-progress", *TINY, "--run-dir", str(run)]
    try:
        result = subprocess.run([sys.executable, "-c", _FAILING_LEARNER, *args], capture_output=True,
                                text=True, timeout=300, env=child_env())
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"the run hung after its learner thread failed: {error}")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "injected learner failure" in output, output[-3000:]
    import json

    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        latest = TrainingCheckpoints(run / "checkpoints").latest()
    if latest is not None:  # whatever was saved before the failure still verifies
        verify_checkpoint_file(find_checkpoint_file(latest / "learner"))


# ------------------------------------------------- the distributed program: killed nodes, no leftovers

psutil = pytest.importorskip("psutil")


def node_processes(root: psutil.Process, title: str) -> list[psutil.Process]:
    """Descendants of `root` whose Ray process title names the node class `title`."""
    found = []
    for process in root.children(recursive=True):
        try:
            if any(part.startswith(f"ray::{title}") for part in process.cmdline()[:1]):
                found.append(process)
        except psutil.Error:
            continue
    return found


def session_processes(session_dirs: set[str]) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(d in part for d in session_dirs for part in process.info["cmdline"] or ()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def alive(processes) -> list[psutil.Process]:
    out = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                out.append(process)
        except psutil.Error:
            continue
    return out


def run_and_kill(tmp_path: Path, kills: list[str], *, steps: int = 10_000_000, flags: tuple[str, ...] = (),
                 last_ends_run: bool = False, env: dict[str, str] | None = None,
                 first_kill_when: Callable[[], bool] | None = None,
                 then: Callable[[subprocess.Popen], None] | None = None,
                 ) -> tuple[int, str, list[psutil.Process]]:
    """`dmpo train --actors 1` on its own cluster; SIGKILLs the node processes named in `kills`, in
    order: an actor is waited for to be replaced before the next kill, a learner, replay node or
    counter for the run's line that it was recovered and for the new program's actor; a name ending in
    "!" is killed again as soon as its replacement exists (a kill during the restore itself); with
    `last_ends_run`, nothing is waited for after the last kill but the driver's exit. The driver runs
    with `env` (default `child_env()`); the first kill waits for `first_kill_when()`; `then(driver)`
    is called after the kills. Returns
    the driver's exit code, its output and every process of its cluster still alive afterwards."""
    run = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "dmpo.cli", "train", "--actors", "1", "--env", "gym:Pendulum-v1",
         "--steps", str(steps), "--eval-episodes", "1", "--no-progress", *TINY, "--run-dir", str(run),
         *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env or child_env())
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(driver.stdout.readline, "")), daemon=True)
    reader.start()
    root = psutil.Process(driver.pid)
    seen: list[psutil.Process] = []
    try:
        def nodes_up() -> bool:
            assert driver.poll() is None, "".join(lines)[-3000:]
            return all(node_processes(root, t) for t in ("ActorNode", "LearnerNode", "ReplayService"))

        wait_for(nodes_up, "the nodes to start", timeout=240, period=0.25)
        learner_log = run / "logs" / "learner" / "logs.csv"
        wait_for(lambda: learner_log.is_file() and len(learner_log.read_text().splitlines()) >= 2,
                 "the learner to step", timeout=240, period=0.25)
        seen = root.children(recursive=True)
        sessions = {part.split("--session-dir=", 1)[1] for p in seen for part in _cmdline(p)
                    if part.startswith("--session-dir=")}
        names = {name for p in alive(seen) for name in [p.name()]}
        assert {"gcs_server", "raylet"} <= names and sessions, names  # the check below sees the cluster
        if first_kill_when is not None:
            wait_for(lambda: first_kill_when() or driver.poll() is not None, "the moment of the first kill",
                     timeout=240, period=0.05)
        for number, kill in enumerate(kills, 1):
            title = kill.rstrip("!")
            # After a kill during a restore the next program may still be starting its nodes.
            def victims(t=title) -> list[psutil.Process]:
                # A driver that ended before this kill fails here with its output, not inside psutil.
                assert driver.poll() is None, (f"the run ended (exit {driver.returncode}) before the "
                                               f"{t} kill: " + "".join(lines)[-3000:])
                return node_processes(root, t)[:1]

            victim = wait_for(victims, f"a {title} to kill", timeout=240, period=0.05)[0]
            recovered = "".join(lines).count("node was lost")
            # The actors of the program about to lose a node: the new program's actor is one not among
            # them. (Taken after the recovery line instead, a loaded machine could let the new actor start
            # first; the wait then lasted until the run had finished its budget, before the next kill.)
            actors = {p.pid for p in node_processes(root, "ActorNode")}
            victim.kill()
            print(f"killed {title} (pid {victim.pid})")
            if last_ends_run and number == len(kills):
                break

            def replaced(v=victim, t=title) -> bool:
                assert driver.poll() is None, "".join(lines)[-3000:]
                seen.extend(root.children(recursive=True))
                return any(p.pid != v.pid for p in node_processes(root, t))

            wait_for(replaced, f"a new {title}", timeout=240, period=0.05 if kill.endswith("!") else 0.25)
            if title != "ActorNode":  # the run recovered: its line, and the new program's actor
                wait_for(lambda n=recovered: "".join(lines).count("node was lost") > n, "the recovery line",
                         timeout=60, period=0.25)
                wait_for(lambda a=actors: {p.pid for p in node_processes(root, "ActorNode")} - a
                         or driver.poll() is not None, "the new program's actor", timeout=240, period=0.25)
        if then is not None:
            then(driver)
        driver.wait(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
    reader.join(10)
    cluster = list({p.pid: p for p in [*seen, *session_processes(sessions)]}.values())
    try:  # processes told to exit may still be on their way out
        wait_for(lambda: not alive(cluster), "the cluster's processes to exit", timeout=30, period=0.1)
    except AssertionError:
        pass  # the test names the ones left
    return driver.returncode, "".join(lines), alive(cluster)


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


@pytest.mark.ray
def test_killed_actor_then_killed_replay_node_stop_the_program_when_no_recovery_is_allowed(tmp_path):
    code, output, left = run_and_kill(tmp_path, ["ActorNode", "ReplayService"],
                                      flags=("--max-node-restarts", "0"), last_ends_run=True)
    # The learner, sampling from the dead replay node, is often the first to notice; the program then
    # checks the replay node and names it.
    assert code == 1 and "replay node failed" in output and "dmpo train --resume" in output, output[-3000:]
    assert "node was lost" not in output, output[-3000:]
    assert not left, [(p.pid, _cmdline(p)) for p in left]


@pytest.mark.ray
def test_a_lost_learner_replay_node_and_counter_are_recovered_and_the_run_finishes(tmp_path):
    """Each node the program cannot run without, killed in turn: the learner while it writes a
    checkpoint (held there), again while it restores the one before, then between checkpoints the
    replay node and the counter. Every loss is one line (and an entry of run.json), the run goes on
    from the newest complete checkpoint and ends `finished` with its budget, and nothing of its cluster
    outlives it."""
    from holds import holding_env  # holds imports this module

    steps, hold = 3000, tmp_path / "hold"
    kills = ["LearnerNode", "LearnerNode!", "ReplayService", "CounterService"]
    code, output, left = run_and_kill(tmp_path, kills, steps=steps,
                                      flags=("--checkpoint-every", "400", "--eval-every", "0",
                                             "--max-node-restarts", "5"),
                                      env=holding_env(hold, final_save_step=800),
                                      first_kill_when=(hold / "holding").is_file)
    assert code == 0, output[-4000:]
    recoveries = re.findall(r"dmpo: warning: the (\w+) node was lost \(.*\); the run goes on from "
                            r"(checkpoint step_\d+|step 0 \(no checkpoint yet\)), (\d+) env steps to redo "
                            r"\(recovery (\d) of at most 5\)", output)
    assert [r[0] for r in recoveries] == ["learner", "learner", "replay", "counter"], output[-4000:]
    assert [int(k) for _, _, _, k in recoveries] == [1, 2, 3, 4]
    # Killed while writing the checkpoint of step 800: the one before it is what the run went on from.
    assert recoveries[0][1] == "checkpoint step_000000000400", output[-4000:]
    run = tmp_path / "run"
    recorded = json.loads((run / "run.json").read_text())["recoveries"]
    assert [(r["node"], r["checkpoint"]) for r in recorded] == [
        (node, origin.removeprefix("checkpoint ") if origin.startswith("checkpoint") else None)
        for node, origin, _, _ in recoveries]
    assert [r["env_steps_redone"] for r in recorded] == [int(redone) for _, _, redone, _ in recoveries]
    assert all(re.fullmatch(r"step_\d{12}", p.name) for p in (run / "checkpoints").iterdir()), \
        sorted(p.name for p in (run / "checkpoints").iterdir())  # no half-written checkpoint left
    state = json.loads((TrainingCheckpoints(run / "checkpoints").latest() / "state.json").read_text())
    assert steps <= state["env_steps"] < steps + 2 * 200, state  # the budget, as one uninterrupted run
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    # The node logs were rewound at each recovery: the redone steps are not logged twice.
    with open(run / "logs" / "environment_loop" / "logs.csv", newline="") as handle:
        logged = [float(row["actor_steps"]) for row in csv.DictReader(handle)]
    assert logged and logged == sorted(logged), logged
    assert not left, [(p.pid, _cmdline(p)) for p in left]


@pytest.mark.ray
def test_a_stop_while_a_learner_lost_before_the_first_checkpoint_is_replaced_ends_the_run_at_step_0(tmp_path):
    """The learner lost before any checkpoint (the recovery starts the run again from step 0), then
    SIGTERM while the driver replaces it (held after the recovery's line, before the new program
    starts): the command ends within --stop-timeout, `interrupted` at step 0 (a resume starts from
    there), and nothing of its cluster outlives it."""
    from holds import holding_env

    hold, run = tmp_path / "hold", tmp_path / "run"
    stopped: list[float] = []

    def stop(driver: subprocess.Popen) -> None:
        wait_for(lambda: (hold / "starting").is_file() or driver.poll() is not None, "the recovery",
                 timeout=120, period=0.05)
        driver.send_signal(signal.SIGTERM)
        stopped.append(time.monotonic())

    code, output, left = run_and_kill(tmp_path, ["LearnerNode"], last_ends_run=True, then=stop,
                                      flags=("--checkpoint-every", "1000000", "--eval-every", "0",
                                             "--stop-timeout", "10"),
                                      env=holding_env(hold, start="recovery"))
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert stopped and time.monotonic() - stopped[0] < 10 + 30, output[-3000:]
    assert "the run goes on from step 0 (no checkpoint yet)" in output, output[-3000:]
    assert f"dmpo: interrupted at 0 env steps; resume with: dmpo train --resume {run}" in output, output
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert not left, [(p.pid, _cmdline(p)) for p in left]
