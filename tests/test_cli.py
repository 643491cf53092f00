"""The `dmpo` command: argument errors fail fast naming the field; train → eval → plot end to end."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from dmpo.cli.main import main
from images import assert_curves_drawn, colour_pixels


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out + captured.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--agent.networks.vmin", "10", "--agent.networks.vmax", "0"],
         "--agent.networks.vmin must be < --agent.networks.vmax (0.0), got 10.0"),
        (["--agent.learner.target-policy-update-period", "-1"],
         "--agent.learner.target-policy-update-period must be a positive integer, got -1"),
        (["--agent.learner.target-critic-update-period", "0"], "--agent.learner.target-critic-update-period"),
        (["--agent.batch-size", "0"], "--agent.batch-size must be a positive integer, got 0"),
        (["--agent.batch-size", "512", "--agent.max-replay-size", "256"],
         "--agent.batch-size must be <= --agent.max-replay-size (256), got 512"),
        (["--agent.learner.discount", "1.5"], "--agent.learner.discount must be in [0, 1], got 1.5"),
        (["--agent.learner.discount", "nan"], "--agent.learner.discount must be in [0, 1], got nan"),
        (["--agent.learner.mpo.epsilon", "0"], "--agent.learner.mpo.epsilon must be a positive finite"),
        (["--steps", "0"], "--steps must be a positive integer, got 0"),
        (["--env", "cartpole"], "--env must be a task name"),
        (["--eval-episodes", "0"], "--eval-episodes must be a positive integer"),  # crashed at the first eval
        (["--actors", "2", "--actor-resources", "{worker: 1}"], "--actor-resources must be a JSON object"),
        (["--actors", "2", "--learner-resources", '{"GPU": 1}'], "--learner-resources must map custom"),
        (["--actors", "2", "--replay-resources", '{"head": -1}'], "--replay-resources must map custom"),
        (["--actor-resources", '{"worker": 1}'], "--actor-resources, --learner-resources and"),
        (["--num-envs", "0"], "--num-envs must be an integer in [1, 256], got 0"),
        (["--num-envs", "257"], "--num-envs must be an integer in [1, 256], got 257"),
        (["--pixels", "--agent.networks.normalize-observations"],
         "--agent.networks.normalize-observations must be False with pixels"),
        (["--actors", "1", "--pixels", "--agent.networks.normalize-observations"],
         "--agent.networks.normalize-observations must be False with pixels"),
        (["--actors", "1", "--agent.networks.residual", "--agent.networks.policy-layer-sizes", "8", "8"],
         "--agent.networks.policy-layer-sizes must be an odd number (at least 3) of equal sizes"),
    ],
)
def test_invalid_train_arguments_name_the_flag_in_one_line(argv, message, capsys, tmp_path):
    code, output = run_cli(["train", "--run-dir", str(tmp_path / "run"), *argv], capsys)
    assert code == 2
    assert output.startswith(f"dmpo: error: {message}") and output.count("\n") == 1, output  # no usage panel
    assert not (tmp_path / "run").exists()  # nothing was created


def test_video_every_on_a_task_that_cannot_render_fails_at_start(capsys, tmp_path):
    pytest.importorskip("gymnasium")
    try:
        import pygame  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pygame is installed: gym classic-control tasks can render")
    code, output = run_cli(["train", "--env", "gym:Pendulum-v1", "--video-every", "1000",
                            "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and output.startswith("dmpo: error: --video-every 1000: cannot render Pendulum-v1")
    assert "pip install 'dmpo-jax[classic-control]'" in output and not (tmp_path / "run").exists()


def test_a_budget_that_ends_before_learning_is_warned_at_start(monkeypatch, capsys, tmp_path):
    import dmpo.cli.train_command

    monkeypatch.setattr(dmpo.cli.train_command, "_train",  # the run itself is not what is tested
                        lambda config, run_dir, **_: {"env_steps": 0, "run_dir": str(run_dir)})
    main(["train", "--agent.batch-size", "100000", "--steps", "100000", "--run-dir", str(tmp_path / "r")])
    assert ("dmpo: warning: --steps 100,000 ends before the agent's first update, which waits for 100,000 "
            "observations (--agent.batch-size 100,000)") in capsys.readouterr().err
    main(["train", "--steps", "1001", "--run-dir", str(tmp_path / "r")])
    assert "warning" not in capsys.readouterr().err


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


def jax_cache_env() -> dict[str, str]:
    """The tests' persistent XLA cache (conftest.py), for a subprocess started with a minimal environment."""
    names = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    return {name: os.environ[name] for name in names}


def test_train_eval_plot_end_to_end(tmp_path):

    """The real command as a user runs it (cartpole with action repeat 8: 125-step episodes)."""
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "dmpo.cli"]
    env = {"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin", **jax_cache_env()}
    train = subprocess.run([*cli, "train", "--steps", "250", "--action-repeat", "8", "--eval-every", "250",
                            "--eval-episodes", "1", "--checkpoint-every", "125", "--video-every", "250",
                            "--run-dir", str(run),
                            *TINY],
                           capture_output=True, text=True, timeout=600, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "finished: 250 env steps" in train.stdout
    # Output to a pipe: the short evaluation line and plain status lines, not the logs' long rows.
    lines = train.stdout.splitlines()
    assert any(re.fullmatch(r"eval @ 250: -?\d+\.\d ± 0\.0 over 1 episode", line) for line in lines), lines
    assert any(line.startswith("train 250/250 steps 100% ETA 0:00:00 | return ") for line in lines), lines
    assert "[Evaluator]" not in train.stdout and "[Environment Loop]" not in train.stdout
    for path in ["config.json", "run.json", "logs/environment_loop/logs.csv", "logs/evaluator/logs.csv",
                 "logs/learner/logs.csv", "snapshots/policy.msgpack"]:
        assert (run / path).is_file(), path
    assert '"status": "finished"' in (run / "run.json").read_text()
    assert_episode_video(run / "videos" / "step_000000000250.mp4", frames=125 + 1)  # --video-every
    assert "os.fork()" not in train.stderr  # ffmpeg starts without running JAX's fork warning

    video = tmp_path / "episode.gif"
    evaluation = subprocess.run([*cli, "eval", str(run), "--episodes", "2", "--video", str(video)],
                                capture_output=True, text=True, timeout=600, env=env)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert "dmc:cartpole-swingup: return" in evaluation.stdout and video.stat().st_size > 0

    at_budget = subprocess.run([*cli, "train", "--resume", str(run)], capture_output=True, text=True,
                               timeout=600, env=env)
    assert at_budget.returncode == 0, at_budget.stderr[-3000:]
    assert "already reached 250 env steps" in at_budget.stdout  # says so, and trains nothing
    resumed = subprocess.run([*cli, "train", "--resume", str(run), "--steps", "375", "--no-progress"],
                             capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: steps 250 -> 375" in resumed.stderr and "finished: 375 env steps" in resumed.stdout
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and len(info["resumes"]) == 1
    assert info["resumes"][0]["config_changes"] == {"steps": {"from": 250, "to": 375}}
    loop_steps = [int(row["actor_steps"]) for row in
                  csv.DictReader((run / "logs/environment_loop/logs.csv").open())]
    assert loop_steps == [125, 250, 375]  # one row per episode: the resume continued, nothing repeated

    png = tmp_path / "curves.png"
    plot = subprocess.run([*cli, "plot", str(run), "-o", str(png), "--label", "environment_loop"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert plot.returncode == 0, plot.stderr[-3000:]
    assert_curves_drawn(png, ["C0"])


def assert_episode_video(path, frames):
    """A whole episode filmed at 240x320 (one frame after reset and one per step), not blank."""
    import imageio.v3 as iio

    video = iio.imread(path, index=None)
    assert video.shape == (frames, 240, 320, 3), video.shape
    assert video.std() > 0


@pytest.mark.ray
def test_distributed_train_eval_plot_resume_end_to_end(tmp_path):
    """`dmpo train --actors 2 --num-envs 4` (8 environments) leaves what a local run leaves (evaluation
    rows, policy snapshot), within the documented budget bound, and `dmpo eval`, `dmpo plot` and
    `--resume` work on it."""
    import csv

    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    run = tmp_path / "run"
    cli = [sys.executable, "-m", "dmpo.cli"]
    env = {"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin", **jax_cache_env()}
    episode = 125  # cartpole with action repeat 8
    common = ["--action-repeat", "8", "--eval-episodes", "2", "--eval-every", "250", *TINY]
    first = subprocess.run([*cli, "train", "--actors", "2", "--num-envs", "4", "--steps", "400",
                            "--video-every", "400",
                            "--run-dir", str(run), *common],
                           capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "finished:" in first.stdout and "last evaluation return" in first.stdout
    # The driver prints each evaluation round as one short line (the final one at 400 steps at least).
    lines = first.stdout.splitlines()
    eval_line = re.compile(r"eval @ [\d,]+: -?\d+\.\d ± \d+\.\d over 2 episodes")
    assert any(eval_line.fullmatch(line) for line in lines), lines
    assert "[Evaluator]" not in first.stdout
    videos = sorted((run / "videos").glob("step_*.mp4"))  # filmed by the evaluator node
    assert videos, "no video"
    assert_episode_video(videos[-1], frames=episode + 1)
    saved = (run / "config.json").read_text()
    assert saved.count('"actors": 2') == 1 and saved.count('"num_envs": 4') == 1  # the whole TrainConfig
    assert any((run / "checkpoints").iterdir())
    state = json.loads(TrainingCheckpoints(run / "checkpoints").latest().joinpath("state.json").read_text())
    # The budget: reached, and the actors stop themselves at most one episode per environment past
    # --steps. (Not "500 per actor": an actor slowed by a loaded machine may not have pushed its first
    # episode's steps when the other's 500 end the run; one such run checkpointed 500 + 204.)
    assert 400 <= state["env_steps"] < 400 + 8 * episode, state["env_steps"]

    with open(run / "logs" / "evaluator" / "logs.csv") as handle:
        rows = list(csv.DictReader(handle))
    local_columns = {"return_mean", "return_std", "return_min", "return_max", "length_mean", "actor_steps",
                     "learner_steps", "evaluator_episodes", "evaluator_steps", "wall_seconds"}
    assert local_columns <= set(rows[0]) and "episode_return" not in rows[0]
    # One row per round of two episodes: at most one per 250-step boundary (boundaries crossed together
    # give one round, as in one process), labelled with the steps it evaluated, and one at the end
    # unless a boundary round was its last.
    rounds = len(rows)
    assert 1 <= rounds <= state["env_steps"] // 250 + 1, rounds
    labels = [int(row["actor_steps"]) for row in rows]
    assert labels == sorted(set(labels)), labels
    assert [int(row["evaluator_episodes"]) for row in rows] == [2 * (i + 1) for i in range(rounds)]
    # The final round is labelled with the steps the run had reached when it saw its budget: the final
    # checkpoint, written while the actors finish their episodes, holds those at least (docs/lifecycle.md),
    # so that the resume below keeps the row.
    assert 400 <= int(rows[-1]["actor_steps"]) <= state["env_steps"], (rows[-1], state)
    assert float(rows[-1]["length_mean"]) == episode
    from dmpo.agent.policies.snapshot import load_policy

    snapshot = load_policy(run)
    assert snapshot.metadata["env"] == "dmc:cartpole-swingup" and snapshot.metadata["action_repeat"] == 8
    assert snapshot.metadata["actor_steps"] >= int(rows[-1]["actor_steps"])

    evaluation = subprocess.run([*cli, "eval", str(run), "--episodes", "1"], capture_output=True, text=True,
                                timeout=600, env=env)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert "dmc:cartpole-swingup: return" in evaluation.stdout
    png = tmp_path / "curves.png"
    plot = subprocess.run([*cli, "plot", str(run), "-o", str(png)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert plot.returncode == 0, plot.stderr[-3000:]
    if rounds > 1:
        assert_curves_drawn(png, ["C0"])
    else:  # a loaded machine can merge the boundary rounds into the final one: one point, its marker
        assert colour_pixels(png, "C0") > 100

    target = state["env_steps"] + 500
    resumed = subprocess.run([*cli, "train", "--resume", str(run), "--steps", str(target)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    latest = json.loads(TrainingCheckpoints(run / "checkpoints").latest().joinpath("state.json").read_text())
    assert target <= latest["env_steps"] < target + 8 * episode
    assert latest["learner_steps"] > state["learner_steps"]
    with open(run / "logs" / "evaluator" / "logs.csv") as handle:
        after = list(csv.DictReader(handle))
    assert len(after) > len(rows) and int(after[-1]["actor_steps"]) >= target
    # The run's wall clock goes on from the checkpoint's (time to score reads it from these rows).
    assert float(after[-1]["wall_seconds"]) > float(rows[-1]["wall_seconds"]) > 0
    assert load_policy(run).metadata["actor_steps"] >= target


def gym_snapshot(tmp_path, env_name="gym:InvertedPendulum-v5"):
    import jax

    from dmpo.agent.networks import PolicyParams, init_params, make_networks
    from dmpo.agent.policies.snapshot import save_policy
    from dmpo.config import NetworkConfig
    from dmpo.envs import make, make_environment_spec

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
    (["--video", "episode.gif", "--camera", "nosuch"],
     "gym:InvertedPendulum-v5: InvertedPendulum-v5 has no camera 'nosuch'; its cameras are"),
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
    # The default preset's "auto-gym" support, resolved once: Pendulum's cost per step is at most
    # π² + 0.1·8² + 0.001·2², so returns at discount 0.99 lie in [-100 times that, 0].
    assert (config["agent"]["networks"]["vmin"], config["agent"]["networks"]["vmax"]) == (
        pytest.approx(-100 * (np.pi**2 + 6.4 + 0.004)), 0.0)
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
    from dmpo.lifecycle.checkpoints import TrainingCheckpoints
    from dmpo.reporting.plotting import load_curve
    from tensorboard_events import shown_scalars

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
        events = [(tag, step) for tag, step, _ in shown_scalars(run / "tb" / label)]
        assert len(events) == len(set(events)), label
    assert load_curve(run, label_source="environment_loop").x.tolist() == [200.0, 400.0]


def test_preset_is_the_config_the_flags_apply_to(monkeypatch, capsys, tmp_path):
    import dataclasses
    import typing

    import dmpo.cli.main
    import dmpo.cli.train_command
    from dmpo.config import AGENT_PRESETS, DMPOConfig, control_suite_preset, sample_efficient_preset

    trained = []

    def record(config, run_dir, *, resume, progress, cluster):
        trained.append(config)
        return {"env_steps": 0, "run_dir": str(run_dir)}

    monkeypatch.setattr(dmpo.cli.train_command, "_train", record)
    run = ["--run-dir", str(tmp_path / "run")]
    main(["train", *run])
    main(["train", "--preset", "control", *run])
    main(["train", "--preset", "reference", *run])
    main(["train", "--preset=fast", *run])
    # A flag overrides the preset's value whether it comes before or after --preset.
    main(["train", "--agent.samples-per-insert", "64", "--preset", "fast", "--seed", "3", *run])
    main(["train", "--preset", "fast", "--agent.samples-per-insert", "64", *run])
    fast = sample_efficient_preset()
    assert [c.agent for c in trained] == [fast, control_suite_preset(), DMPOConfig(), fast,
                                          dataclasses.replace(fast, samples_per_insert=64.0),
                                          dataclasses.replace(fast, samples_per_insert=64.0)]
    assert trained[4].seed == 3

    # The choices --help lists are the presets that exist.
    hints = typing.get_type_hints(dmpo.cli.main.train, include_extras=True)
    assert set(typing.get_args(hints["preset"])) == set(AGENT_PRESETS)

    code, output = run_cli(["train", "--preset", "turbo", *run], capsys)
    assert code == 2 and "turbo" in output and "fast" in output, output
    code, output = run_cli(["train", "--resume", str(tmp_path / "run"), "--preset", "fast"], capsys)
    assert code == 2 and "--preset fast with --resume" in " ".join(output.split()), output
    code, output = run_cli(["train", "--preset", "default", *run], capsys)
    assert code == 2 and "control (the earlier default)" in " ".join(output.split()), output
    assert len(trained) == 6  # no error trained


def test_file_system_problems_are_one_line_naming_the_path(tmp_path, capsys):
    """Each used to be a 29-38-line traceback; now checked before any work starts."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cases = [
        (["train", "--run-dir", str(a_file)], f"run directory {a_file} is a file"),
        (["train", "--run-dir", str(a_file / "run")], f"{a_file} is a file"),
        (["plot", str(tmp_path), "-o", str(a_file / "curves.png")], f"the folder {a_file} does not exist"),
        (["plot", str(tmp_path), "-o", str(tmp_path)], f"--output {tmp_path} is a folder"),
        (["eval", str(tmp_path), "--video", str(a_file / "v.mp4")], f"the folder {a_file} does not exist"),
    ]
    for argv, expected in cases:
        code, output = run_cli(argv, capsys)
        assert code == 2 and expected in output, (argv, output)
        assert output.strip().count("\n") == 0 and output.startswith("dmpo: error:"), (argv, output)


def test_every_train_flag_has_help_text_on_one_line():
    """`dmpo train --help` describes every flag, each as one paragraph the terminal wraps (tyro kept a
    docstring's line breaks, which showed in mid-sentence)."""
    import tyro

    from dmpo.cli.flags import reflow_help
    from dmpo.cli.train_command import train

    reflow_help()  # as `dmpo.cli.main` does before parsing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # get_parser: tyro's own way to see the parser
        parser = tyro.extras.get_parser(train)
    options = [action for action in parser._actions
               if action.option_strings and "-h" not in action.option_strings]
    assert len(options) > 50
    for action in options:
        text = re.sub(r"\(default: .*\)$", "", (action.help or "").strip(), flags=re.S).strip()
        assert text, f"{action.option_strings[0]} has no help text"
        assert "\n" not in action.help, f"{action.option_strings[0]}'s help breaks: {action.help!r}"
