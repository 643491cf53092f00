"""Edges a user meets with their own environment in the first hour (issue 47, item 10): `dmpo
check-env` says a factory's error in one line and shows the task's own action bounds and its action
repeat; an environment error during training names the run's episode, the one the logs count; and
`--steps` says which steps it counts."""

from __future__ import annotations

import pytest
from tests.envs_for_tests import PointMass

import dmpo
from dmpo.cli.main import main
from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs import EnvError
from dmpo.utils.seeds import segment_seed

ENVS = "tests.envs_for_tests"


def cli(argv, capsys):
    """`dmpo ARGV` in this process: (exit code, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_check_env_says_what_the_factory_raised_in_one_line(capsys):
    code, out, err = cli(["check-env", f"{ENVS}:make_raising"], capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"dmpo: error: {ENVS}:make_raising: the environment factory raised "
                                "RuntimeError: the simulator's licence server did not answer"], err


def test_check_env_shows_the_tasks_own_action_bounds_and_repeat(capsys):
    code, out, err = cli(["check-env", "gym:Pendulum-v1", "--steps", "100", "--action-repeat", "2"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    own = lines.index("actions (the task's own: an action a in [-1, 1] is sent as "
                      "low + (a + 1)(high - low) / 2):")
    assert lines[own + 1] == "  float32 [1] in [-2.0, 2.0]"  # Pendulum-v1's torque: Box(-2, 2, (1,))
    assert lines[own + 2] == "action repeat: 2 task step(s) per agent step"
    # 100 agent steps of 2 task steps: one 200-step Pendulum episode.
    assert "100 random steps (200 task steps): 1 episode(s) ended" in out


def test_an_environment_error_names_the_runs_episode(tmp_path):
    """Every episode is a segment of its own (a checkpoint at each 20-step episode end), so each one
    runs in a new environment; the third is made to give a NaN reward at its third step."""
    seed = 5
    third = segment_seed(seed, 2, 0)  # the seed of the environment of the run's third episode

    def factory(env_seed):
        return PointMass(bad_step=3 if env_seed == third else None)

    agent = DMPOConfig(batch_size=8, min_replay_size=1000, max_replay_size=2000,
                       learner=LearnerConfig(num_samples=2),
                       networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5,
                                              vmin=-100.0, vmax=0.0))
    config = TrainConfig(env="gym:Pendulum-v1", steps=200, seed=seed, eval_every=0, checkpoint_every=20,
                         agent=agent)
    with pytest.raises(EnvError, match=r"episode 3, step 3: the reward is not finite"):
        dmpo.train(config, tmp_path / "run", env_factory=factory, quiet=True)


def test_steps_help_says_it_counts_agent_steps_and_the_tasks_run_action_repeat_times_as_many(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "one per action it takes" in help_text
    assert "`--steps 4000 --action-repeat 2` is 8,000 task steps" in help_text

