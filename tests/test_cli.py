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
        (["--eval-episodes", "0"], "TrainConfig.eval_episodes"),  # crashed at the first evaluation
        (["--num-envs", "0"], "TrainConfig.num_envs"),
        (["--num-envs", "257"], "TrainConfig.num_envs"),
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
    """`dmpo train --actors 2 --num-envs 4` (8 environments) on a private local Ray cluster keeps the
    TrainConfig, checkpoints, and resumes from its checkpoint with a larger budget."""
    import json

    run = tmp_path / "run"
    cli = [sys.executable, "-m", "dmpo.cli"]
    env = {"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin"}
    common = ["--action-repeat", "8", "--eval-episodes", "1", *TINY]
    first = subprocess.run([*cli, "train", "--actors", "2", "--num-envs", "4", "--steps", "400", "--run-dir",
                            str(run), *common], capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "finished:" in first.stdout
    saved = (run / "config.json").read_text()
    assert saved.count('"actors": 2') == 1 and saved.count('"num_envs": 4') == 1  # the whole TrainConfig
    checkpoints = sorted((run / "checkpoints").glob("step_*"))
    before = json.loads((checkpoints[-1] / "state.json").read_text())["counts"]["actor_steps"]
    assert before >= 400
    resumed = subprocess.run([*cli, "train", "--resume", str(run), "--steps", str(before + 500)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads((sorted((run / "checkpoints").glob("step_*"))[-1] / "state.json").read_text())
    assert after["counts"]["actor_steps"] >= before + 500 and after["learner_steps"] > 0


def gym_snapshot(tmp_path, env_name="gym:InvertedPendulum-v5"):
    import jax

    from dmpo.config import NetworkConfig
    from dmpo.envs import make
    from dmpo.networks import PolicyParams, init_params, make_networks
    from dmpo.snapshot import save_policy
    from dmpo.types import make_environment_spec

    spec = make_environment_spec(make(env_name, seed=0))
    config = NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5)
    params = init_params(make_networks(spec, config), spec, jax.random.PRNGKey(0))
    return save_policy(tmp_path / "snapshots" / "policy.msgpack", spec, config,
                       PolicyParams(params.observation, params.policy), metadata={"env": env_name})


def test_eval_video_of_a_gym_run(tmp_path, capsys):
    """gym: environments were made without a render_mode, so every `dmpo eval --video` failed."""
    snapshot = gym_snapshot(tmp_path)
    video = tmp_path / "episode.gif"
    main(["eval", str(snapshot), "--episodes", "1", "--video", str(video)])
    output = capsys.readouterr().out
    assert "gym:InvertedPendulum-v5: return" in output
    import imageio.v3 as iio

    frames = iio.imread(video, index=None)
    assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[-1] == 3
    assert frames.std() > 0  # a picture, not a blank frame


@pytest.mark.parametrize("extra, expected", [
    (["--env", "dmc:cartpole-swingup"], "dmc:cartpole-swingup"),  # another task: observation shapes differ
    (["--video", "episode.avi"], ".mp4 or .gif"),
    (["--env", "dmc:nonexistent-task"], "nonexistent"),
])
def test_eval_errors_are_one_line(tmp_path, capsys, extra, expected):
    snapshot = gym_snapshot(tmp_path)
    code, output = run_cli(["eval", str(snapshot), "--episodes", "1", *extra], capsys)
    assert code == 2 and expected in output, output
    assert "Traceback" not in output and output.strip().startswith("dmpo: error:"), output


def test_resume_applies_the_flags_given_and_refuses_the_others(tmp_path, capsys):
    """`--resume` used to replace the whole config with the saved one, dropping `--steps 400`."""
    import json

    run = tmp_path / "run"
    common = ["--no-progress"]
    main(["train", "--env", "gym:Pendulum-v1", "--steps", "200", "--eval-every", "0",
          "--checkpoint-every", "200", "--run-dir", str(run), *common, *TINY])
    capsys.readouterr()
    main(["train", "--resume", str(run), "--steps", "400", "--checkpoint-every", "100", *common])
    assert "finished: 400 env steps" in capsys.readouterr().out
    config = json.loads((run / "config.json").read_text())["config"]
    assert (config["steps"], config["checkpoint_every"]) == (400, 100)
    assert config["agent"]["networks"]["policy_layer_sizes"] == [8]  # the saved flags are kept
    (entry,) = json.loads((run / "run.json").read_text())["resumes"]
    assert entry["config_changes"] == {"steps": {"from": 200, "to": 400},
                                       "checkpoint_every": {"from": 200, "to": 100}}

    code, output = run_cli(["train", "--resume", str(run), "--agent.networks.policy-layer-sizes", "16",
                            "--env", "gym:MountainCarContinuous-v0", "--steps", "600"], capsys)
    output = " ".join(output.split())
    assert code == 2 and "agent.networks.policy_layer_sizes" in output and "env (saved" in output, output
    assert "steps (saved" not in output  # steps may change; only the fixed fields are named
    assert json.loads((run / "config.json").read_text())["config"]["steps"] == 400  # nothing applied

    code, output = run_cli(["train", "--resume", str(run), "--actors", "2"], capsys)
    assert code == 2 and "--actors" in output

    # A run killed after rows past its last usable checkpoint were logged: here the newest checkpoint
    # (step 400) is corrupt, so the resume falls back to step 200, and the logs of steps 201..400 must
    # not show twice.
    from dmpo.plotting import load_curve
    from dmpo.runners.checkpoints import TrainingCheckpoints
    from dmpo.utils.event_files import scalar_events

    newest = TrainingCheckpoints(run / "checkpoints").paths()[-1]
    assert newest.name == "step_000000000400"
    (learner_file,) = (newest / "learner").glob("*.ckpt")
    learner_file.write_bytes(learner_file.read_bytes()[:-10])
    main(["train", "--resume", str(run), *common])
    captured = capsys.readouterr()
    assert f"dmpo: warning: skipping unusable checkpoint {newest}" in " ".join(captured.err.split())
    assert "finished: 400 env steps" in captured.out
    for label, key in [("environment_loop", "actor_steps"), ("learner", "learner_steps")]:
        rows = (run / "logs" / label / "logs.csv").read_text().splitlines()
        column = rows[0].split(",").index(key)
        steps = [int(float(row.split(",")[column])) for row in rows[1:]]
        assert len(steps) == len(set(steps)) and steps == sorted(steps), (label, steps)
        events = [(tag, step) for tag, step, _ in scalar_events(run / "tb" / label)]
        assert len(events) == len(set(events)), label
    assert load_curve(run, label_source="environment_loop").x.tolist() == [200.0, 400.0]


def test_preset_is_the_config_the_flags_apply_to(monkeypatch, capsys, tmp_path):
    import dataclasses
    import typing

    import dmpo.cli
    import dmpo.runners.local
    from dmpo.config import AGENT_PRESETS, DMPOConfig, control_suite_preset, sample_efficient_preset

    trained = []

    def record(config, run_dir, *, resume, progress):
        trained.append(config)
        return {"env_steps": 0, "run_dir": str(run_dir)}

    monkeypatch.setattr(dmpo.runners.local, "train", record)
    run = ["--run-dir", str(tmp_path / "run")]
    main(["train", *run])
    main(["train", "--preset", "reference", *run])
    main(["train", "--preset=fast", *run])
    # A flag overrides the preset's value whether it comes before or after --preset.
    main(["train", "--agent.samples-per-insert", "64", "--preset", "fast", "--seed", "3", *run])
    main(["train", "--preset", "fast", "--agent.samples-per-insert", "64", *run])
    fast = sample_efficient_preset()
    assert [c.agent for c in trained] == [control_suite_preset(), DMPOConfig(), fast,
                                          dataclasses.replace(fast, samples_per_insert=64.0),
                                          dataclasses.replace(fast, samples_per_insert=64.0)]
    assert trained[3].seed == 3

    # The choices --help lists are the presets that exist.
    hints = typing.get_type_hints(dmpo.cli.train, include_extras=True)
    assert set(typing.get_args(hints["preset"])) == set(AGENT_PRESETS)

    code, output = run_cli(["train", "--preset", "turbo", *run], capsys)
    assert code == 2 and "turbo" in output and "fast" in output, output
    code, output = run_cli(["train", "--resume", str(tmp_path / "run"), "--preset", "fast"], capsys)
    assert code == 2 and "--preset fast with --resume" in " ".join(output.split()), output
    assert len(trained) == 5  # neither error trained
