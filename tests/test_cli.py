"""The `dmpo` command: argument errors fail fast naming the field; train → eval → plot end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmpo.cli import main


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out + captured.err


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--agent.networks.vmin", "10", "--agent.networks.vmax", "0"], "NetworkConfig.vmin"),
        (["--agent.learner.target-policy-update-period", "-1"], "target_policy_update_period"),
        (["--agent.learner.target-critic-update-period", "0"], "target_critic_update_period"),
        (["--agent.batch-size", "512", "--agent.max-replay-size", "256"], "DMPOConfig.batch_size"),
        (["--agent.learner.discount", "1.5"], "LearnerConfig.discount"),
        (["--steps", "0"], "TrainConfig.steps"),
        (["--env", "cartpole"], "TrainConfig.env"),
    ],
)
def test_invalid_train_arguments_name_the_field(argv, field, capsys, tmp_path):
    code, output = run_cli(["train", "--run-dir", str(tmp_path / "run"), *argv], capsys)
    assert code != 0
    assert field in " ".join(output.split()), output  # rich may wrap the message across lines
    assert not (tmp_path / "run").exists()  # nothing was created


def test_unknown_environment_fails_before_creating_a_run(capsys, tmp_path):
    code, output = run_cli(["train", "--env", "dmc:nonexistent-task", "--run-dir", str(tmp_path / "run")],
                           capsys)
    assert code == 2
    assert "nonexistent" in output and "cartpole-swingup" in output  # lists what is supported
    assert not (tmp_path / "run").exists()


def test_resume_of_a_missing_run_is_a_clear_error(capsys, tmp_path):
    code, output = run_cli(["train", "--resume", str(tmp_path / "nothing")], capsys)
    assert code == 2 and "not a run directory" in output


def test_eval_of_a_missing_snapshot_is_a_clear_error(capsys, tmp_path):
    code, output = run_cli(["eval", str(tmp_path / "nothing"), "--episodes", "1"], capsys)
    assert code == 2 and "no policy snapshot" in output


TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2", "--agent.batch-size", "16",
        "--agent.min-replay-size", "100", "--agent.max-replay-size", "2000",
        "--agent.samples-per-insert", "16"]


def test_train_eval_plot_end_to_end(tmp_path):
    """The real command as a user runs it (cartpole with action repeat 8: 125-step episodes)."""
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "dmpo.cli"]
    env = {"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin"}
    train = subprocess.run([*cli, "train", "--steps", "250", "--action-repeat", "8", "--eval-every", "250",
                            "--eval-episodes", "1", "--checkpoint-every", "125", "--run-dir", str(run),
                            *TINY],
                           capture_output=True, text=True, timeout=600, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "finished: 250 env steps" in train.stdout
    for path in ["config.json", "run.json", "logs/environment_loop/logs.csv", "logs/evaluator/logs.csv",
                 "logs/learner/logs.csv", "snapshots/policy.msgpack"]:
        assert (run / path).is_file(), path
    assert '"status": "finished"' in (run / "run.json").read_text()

    video = tmp_path / "episode.gif"
    evaluation = subprocess.run([*cli, "eval", str(run), "--episodes", "2", "--video", str(video)],
                                capture_output=True, text=True, timeout=600, env=env)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert "dmc:cartpole-swingup: return" in evaluation.stdout and video.stat().st_size > 0

    resumed = subprocess.run([*cli, "train", "--resume", str(run)], capture_output=True, text=True,
                             timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]  # already at its budget: resumes and finishes

    png = tmp_path / "curves.png"
    plot = subprocess.run([*cli, "plot", str(run), "-o", str(png), "--label", "environment_loop"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert plot.returncode == 0, plot.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.ray
def test_distributed_train_and_resume_from_the_command_line(tmp_path):
    """`dmpo train --actors 2` on a private local Ray cluster keeps the TrainConfig and checkpoints."""
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "dmpo.cli"]
    env = {"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin", "RAY_AUTH_MODE": "disabled"}
    common = ["--action-repeat", "8", "--eval-episodes", "1", *TINY]
    first = subprocess.run([*cli, "train", "--actors", "2", "--steps", "400", "--run-dir", str(run), *common],
                           capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "finished:" in first.stdout
    assert (run / "config.json").read_text().count('"actors": 2') == 1  # the whole TrainConfig is kept
    assert any((run / "checkpoints").iterdir())
