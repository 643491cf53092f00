"""An interrupted run can be evaluated and exported: `kill -TERM` before the first evaluation writes the
policy snapshot with the final checkpoint. In one process here; with `--actors`, the SIGTERM test of
tests/test_interrupts_cli.py checks the same snapshot of its interrupted run (one distributed start for
both)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

import dmpo
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from holds import PAUSE_AFTER_CHECKPOINT, interrupt_moment
from test_faults import TINY, child_env, wait_for

CLI = [sys.executable, "-m", "dmpo.cli"]


def interrupt_after_first_checkpoint(run: Path, hold: Path | None = None) -> None:
    """`dmpo train` with no evaluation (so no snapshot yet), SIGTERM once a checkpoint exists; with
    `hold` (one process), SIGTERM while the run is held mid-episode after that checkpoint."""
    command = [*CLI, "train", "--env", "gym:Pendulum-v1", "--steps", "10000000", "--checkpoint-every", "200",
               "--eval-every", "0", "--no-progress", "--run-dir", str(run), *TINY]
    env, ready = interrupt_moment(run, hold)
    trainer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: ready() or trainer.poll() is not None, "the moment to interrupt", timeout=400,
                 period=0.2)
        assert trainer.poll() is None, trainer.stderr.read()[-3000:]
        assert not (run / "snapshots" / "policy.msgpack").exists()  # only an evaluation or the end writes one
        trainer.send_signal(signal.SIGTERM)
        _, stderr = trainer.communicate(timeout=300)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(30)
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted", stderr[-3000:]


def check_usable(run: Path, tmp_path: Path) -> dict:
    policy = dmpo.load_policy(run)
    assert policy.action_minimum.tolist() == [-2.0] and policy.action_maximum.tolist() == [2.0]
    evaluation = subprocess.run([*CLI, "eval", str(run), "--episodes", "1"], capture_output=True, text=True,
                                timeout=300, env=child_env())
    assert evaluation.returncode == 0 and "return" in evaluation.stdout, evaluation.stderr[-3000:]
    export = subprocess.run([*CLI, "export", str(run), "--format", "stablehlo", "-o", str(tmp_path / "p")],
                            capture_output=True, text=True, timeout=300, env=child_env())
    assert export.returncode == 0, export.stderr[-3000:]
    assert np.isfinite(policy(np.zeros(3, np.float32))).all()
    return policy.metadata


def test_an_interrupted_local_run_has_the_snapshot_of_its_final_checkpoint(tmp_path):
    run = tmp_path / "run"
    interrupt_after_first_checkpoint(run, hold=tmp_path / "hold")
    metadata = check_usable(run, tmp_path)
    latest = TrainingCheckpoints(run / "checkpoints").latest()
    state = json.loads((latest / "state.json").read_text())
    # The interrupt-time checkpoint: the first (200, Pendulum's first episode end) plus the steps done
    # before the hold.
    assert state["mid_episode"] is True and state["env_steps"] == 200 + PAUSE_AFTER_CHECKPOINT - 1
    assert metadata["actor_steps"] == state["env_steps"]  # the snapshot of that same moment
