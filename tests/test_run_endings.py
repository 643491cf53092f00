"""How the `Run` ends a run that a signal stops (issue 47, items 5 and 6).

- The interrupt line names the env steps of the checkpoint the stop wrote, where `--resume`
  continues, not a count the executor read at another moment (a distributed stop reads the shared
  count while the learner saves its own).
- A signal during the final checkpoint of a run that reached its budget (the real command, one
  process), or after it while the run closes: the run is `finished` and its line says so; a resume of
  a run whose newest checkpoint holds its budget but whose status is not `finished` writes the final
  events that are missing and finishes it.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs.fakes import FakeEnvironment
from dmpo.lifecycle.interrupts import message
from dmpo.run.run import Run
from holds import holding_env
from test_faults import TINY, child_env, wait_for

CLI = [sys.executable, "-m", "dmpo.cli", "train"]

TINY_AGENT = DMPOConfig(batch_size=8, min_replay_size=16, max_replay_size=500, samples_per_insert=8.0,
                        learner=LearnerConfig(num_samples=2),
                        networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))


def fake_task(seed: int) -> FakeEnvironment:
    return FakeEnvironment(observation_shape=(3,), action_dim=1, episode_length=20, seed=seed % 1000)


class StoppedAfterSaving:
    """An executor whose stop saves a checkpoint of 3724 env steps while its own count says 2521 (what
    a distributed stop could report: the learner saved after the count was read)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def start(self) -> None:
        pass

    def train(self) -> None:
        raise KeyboardInterrupt  # a Ctrl-C while training

    def env_steps(self) -> int:
        return 2521

    def interrupted(self) -> None:
        folder = self.run.path / "checkpoints" / "step_000000003724"
        folder.mkdir(parents=True)
        (folder / "state.json").write_text("{}")

    def close(self, failed: bool = False) -> None:
        pass


def signalled_run(tmp_path: Path, executor) -> tuple[KeyboardInterrupt, Run]:
    """A 10,000-step `Run` on `executor(run)`, which a signal stops: (the interrupt raised, the run)."""
    config = TrainConfig(env="test:fake", steps=10_000, eval_every=0, checkpoint_every=0, agent=TINY_AGENT)
    run = Run(config, tmp_path / "run", progress=False, quiet=True, env_factory=fake_task)
    run._executor = lambda: executor(run)
    with pytest.raises(KeyboardInterrupt) as stopped:
        run.train()
    return stopped.value, run


def test_the_interrupt_line_names_the_steps_of_the_checkpoint_written(tmp_path: Path):
    interrupt, run = signalled_run(tmp_path, StoppedAfterSaving)
    assert message(interrupt) == (f"interrupted at 3724 env steps; resume with: dmpo train --resume "
                                  f"{run.path}")
    assert json.loads((run.path / "run.json").read_text())["status"] == "interrupted"


class StoppedWhileClosing:
    """An executor that trains to its budget, writes its final checkpoint, and then takes a SIGTERM
    while it closes (a private Ray cluster shutting down after the run ended `finished`)."""

    def __init__(self, run: Run) -> None:
        self.run, self.closed = run, False

    def start(self) -> None:
        pass

    def train(self) -> None:
        pass

    def env_steps(self) -> int:
        return 10_000

    def evaluate(self, film: bool) -> None:
        return None

    def finish(self, final) -> tuple[str, None]:
        folder = self.run.path / "checkpoints" / "step_000000010000"
        folder.mkdir(parents=True)
        (folder / "state.json").write_text("{}")
        return "finished", None

    def interrupted(self) -> None:
        raise AssertionError("a run that has finished writes no interrupt checkpoint")

    def close(self, failed: bool = False) -> None:
        if not self.closed:
            self.closed = True
            interrupt = KeyboardInterrupt()
            interrupt.signum = signal.SIGTERM
            raise interrupt


def test_a_signal_while_a_finished_run_closes_is_said_as_finished(tmp_path: Path):
    interrupt, run = signalled_run(tmp_path, StoppedWhileClosing)
    # Not "interrupted ...; resume with": run.json says finished, and a resume would have nothing to do.
    assert message(interrupt) == (f"finished at 10000 env steps, run directory {run.path} (SIGTERM came "
                                  "as the run closed, after its final checkpoint was written)")
    assert json.loads((run.path / "run.json").read_text())["status"] == "finished"


def evaluation_steps(run: Path) -> list[int]:
    with open(run / "logs" / "evaluator" / "logs.csv", newline="") as handle:
        return [int(float(row["actor_steps"])) for row in csv.DictReader(handle)]


def test_a_run_stopped_at_its_budget_is_finished_by_its_resume(tmp_path: Path):
    """SIGTERM during the evaluation at the budget (one 200-step Pendulum episode): the stop writes a
    checkpoint of all 200 steps and says `interrupted`; `--resume` then evaluates those steps, which
    the evaluation cut short had not logged, and finishes the run, without training a step."""
    run, hold = tmp_path / "run", tmp_path / "hold"
    env = holding_env(hold)
    env["DMPO_TEST_HOLD_EVALUATION_STEP"] = "200"
    trainer = subprocess.Popen([*CLI, "--env", "gym:Pendulum-v1", "--steps", "200", "--eval-every", "200",
                                "--eval-episodes", "1", "--no-progress", "--run-dir", str(run), *TINY],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: (hold / "evaluating").is_file() or trainer.poll() is not None,
                 "the evaluation at 200", timeout=300)
        assert trainer.poll() is None, trainer.communicate()[1][-3000:]
        trainer.send_signal(signal.SIGTERM)
        _, stderr = trainer.communicate(timeout=300)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(30)
    assert trainer.returncode == 143, stderr[-3000:]
    assert f"dmpo: interrupted at 200 env steps; resume with: dmpo train --resume {run}" in stderr, stderr
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert 200 not in evaluation_steps(run)

    learner = (run / "logs" / "learner" / "logs.csv").read_text()
    resumed = subprocess.run([*CLI, "--resume", str(run), "--no-progress"], capture_output=True, text=True,
                             timeout=300, env=child_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"finished: 200 env steps, run directory {run}" in resumed.stdout, resumed.stdout
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and len(info["resumes"]) == 1, info
    assert evaluation_steps(run).count(200) == 1
    assert (run / "logs" / "learner" / "logs.csv").read_text() == learner  # no step trained
