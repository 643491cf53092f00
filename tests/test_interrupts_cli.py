"""`kill -TERM` of a real `dmpo train` (what SLURM, Kubernetes, systemd and `timeout` send): a final
checkpoint, run.json "interrupted", one line with the resume hint, exit code 143; while it runs, a
second `--resume` on its run directory is refused naming its pid; the resume then finishes the run,
and resuming the finished run changes nothing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from holds import PAUSE_AFTER_CHECKPOINT, interrupt_moment
from test_faults import TINY, child_env, wait_for

CLI = [sys.executable, "-m", "dmpo.cli", "train"]
COMMON = ["--eval-every", "0", "--no-progress", *TINY]
HINT = re.compile(r"^dmpo: interrupted at (\d+) env steps; resume with: dmpo train --resume (\S+)$")


def files_of(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def terminate_after_first_checkpoint(command: list[str], run: Path, timeout: float,
                                     hold: Path | None = None) -> tuple[str, int]:
    """Starts `command`; once a checkpoint exists (with `hold`, one process: once the run is held
    mid-episode after it), checks that a second `--resume` is refused, then sends SIGTERM. Returns
    (stderr, env steps of the hint) after checking exit code and hint."""
    env, ready = interrupt_moment(run, hold)
    trainer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: ready() or trainer.poll() is not None, "the moment to interrupt", timeout=timeout,
                 period=0.2)
        assert trainer.poll() is None, trainer.stderr.read()[-3000:]
        second = subprocess.run([*CLI, "--resume", str(run), "--no-progress"], capture_output=True,
                                text=True, timeout=300, env=child_env())
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.strip().splitlines() == [
            f"dmpo: error: run directory {run} is in use by process {trainer.pid} (lock {run / '.lock'}); "
            "wait for it to end or stop it first"], second.stderr
        assert not (run / "snapshots" / "policy.msgpack").exists()  # only an evaluation or the end writes one
        trainer.send_signal(signal.SIGTERM)
        _, stderr = trainer.communicate(timeout=300)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(30)
    assert trainer.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    # Pendulum's critic support, resolved and announced before training, is not about the signal.
    lines = [line for line in stderr.strip().splitlines()
             if line.startswith("dmpo:") and not line.startswith("dmpo: critic support")]
    assert len(lines) == 1, stderr[-3000:]
    match = HINT.match(lines[0])
    assert match and match.group(2) == str(run), lines
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted", info
    return stderr, int(match.group(1))


def test_sigterm_of_local_train_checkpoints_and_resumes(tmp_path):
    run = tmp_path / "run"
    command = [*CLI, "--env", "gym:Pendulum-v1", "--steps", "100000", "--checkpoint-every", "200",
               "--run-dir", str(run), *COMMON]
    _, steps = terminate_after_first_checkpoint(command, run, timeout=300, hold=tmp_path / "hold")
    assert steps == 200 + PAUSE_AFTER_CHECKPOINT - 1  # the first checkpoint (an episode end), then the hold
    latest = TrainingCheckpoints(run / "checkpoints").latest()
    saved = json.loads((latest / "state.json").read_text())
    assert saved["env_steps"] == steps and saved["mid_episode"] is True  # the final, interrupt-time save

    target = steps + 200  # one 200-step Pendulum episode: the resume starts a new episode
    resumed = subprocess.run([*CLI, "--resume", str(run), "--steps", str(target), "--no-progress"],
                             capture_output=True, text=True, timeout=600, env=child_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"finished: {target} env steps" in resumed.stdout
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and len(info["resumes"]) == 1
    # One checkpoint per step at the finish (a normal finish used to store the last step twice).
    assert TrainingCheckpoints(run / "checkpoints").steps().count(target) == 1

    before = files_of(run)
    again = subprocess.run([*CLI, "--resume", str(run), "--no-progress"], capture_output=True, text=True,
                           timeout=300, env=child_env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"already reached {target} env steps" in again.stdout
    after = files_of(run)
    after.pop(".lock", None), before.pop(".lock", None)
    assert after == before  # nothing written: no evaluation row, no step_N-2


@pytest.mark.ray
def test_sigterm_of_distributed_train_checkpoints_and_resumes(tmp_path):
    pytest.importorskip("ray")
    run = tmp_path / "run"
    command = [*CLI, "--actors", "1", "--env", "gym:Pendulum-v1", "--steps", "100000",
               "--checkpoint-every", "200", "--run-dir", str(run), *COMMON]
    _, steps = terminate_after_first_checkpoint(command, run, timeout=400)
    resumed_steps = json.loads((TrainingCheckpoints(run / "checkpoints").latest() / "state.json")
                               .read_text())["env_steps"]
    assert steps == resumed_steps  # the line names the steps the final checkpoint holds
    # The stop wrote the policy snapshot (there was no evaluation): the run can be evaluated and exported.
    from test_interrupt_snapshot import check_usable

    assert check_usable(run, tmp_path)["actor_steps"] >= 200
    target = resumed_steps + 200
    resumed = subprocess.run([*CLI, "--resume", str(run), "--steps", str(target), "--no-progress"],
                             capture_output=True, text=True, timeout=600, env=child_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "finished:" in resumed.stdout
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
