"""How the `Run` ends a run that a signal stops (issue 47, items 5 and 6).

- The interrupt line names the env steps of the checkpoint the stop wrote, where `--resume`
  continues, not a count the executor read at another moment (a distributed stop reads the shared
  count while the learner saves its own).
- A signal during the final checkpoint of a run that reached its budget (the real command, one
  process): the run is `finished`, and a resume of a run whose newest checkpoint holds its budget but
  whose status is not `finished` writes the final events that are missing and finishes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs.fakes import FakeEnvironment
from dmpo.lifecycle.interrupts import message
from dmpo.run.run import Run

TINY_AGENT = DMPOConfig(batch_size=8, min_replay_size=16, max_replay_size=500, samples_per_insert=8.0,
                        learner=LearnerConfig(num_samples=2),
                        networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))


def fake_task(seed: int) -> FakeEnvironment:
    return FakeEnvironment(observation_shape=(3,), action_dim=1, episode_length=20, seed=seed % 1000)


class StoppedAfterSaving:
    """An executor whose stop saves a checkpoint of 3724 env steps while its own count says 2521 (what
    a distributed stop could report: the learner saved after the count was read)."""

    evaluates_while_stopping = False

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


def test_the_interrupt_line_names_the_steps_of_the_checkpoint_written(tmp_path: Path):
    config = TrainConfig(env="test:fake", steps=10_000, eval_every=0, checkpoint_every=0, agent=TINY_AGENT)
    run = Run(config, tmp_path / "run", progress=False, quiet=True, env_factory=fake_task)
    run._executor = lambda: StoppedAfterSaving(run)
    with pytest.raises(KeyboardInterrupt) as stopped:
        run.train()
    assert message(stopped.value) == (f"interrupted at 3724 env steps; resume with: dmpo train --resume "
                                      f"{run.path}")
    assert json.loads((run.path / "run.json").read_text())["status"] == "interrupted"
