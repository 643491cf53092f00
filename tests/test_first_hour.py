"""What a new user meets in the first hour: closest-match suggestions for a mistyped flag or task,
each warning said once, lines that fit a 40-column terminal, an ETA only once there is a rate, rounded
plot legends, plural forms, no empty folders, and `--resume --help` naming what may change."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmpo.cli.main import RESUMABLE_FIELDS, main
from dmpo.reporting.progress import Progress, format_evaluation
from dmpo.utils.spelling import closest, edit_distance

TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2", "--agent.batch-size", "16",
        "--agent.min-replay-size", "100", "--agent.max-replay-size", "2000",
        "--agent.samples-per-insert", "16"]


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -------------------------------------------------------------------------------- closest matches


def test_edit_distance_counts_single_character_edits():
    # Textbook pairs: kitten → sitting takes 3 edits, flaw → lawn 2; distance is symmetric.
    assert edit_distance("kitten", "sitting") == edit_distance("sitting", "kitten") == 3
    assert edit_distance("flaw", "lawn") == 2 and edit_distance("", "abc") == 3
    assert edit_distance("a", "a") == 0
    assert closest("--step", ["--agent.learner.sgd-steps-per-call", "--agent.n-step", "--steps"],
                   separator=".")[0] == "--steps"


@pytest.mark.parametrize("argv, first", [
    (["train", "--step", "100"], "--steps"),
    (["train", "--preset", "control", "--step", "100"], "--steps"),
    (["train", "--batch-size", "64"], "--agent.batch-size"),
    (["train", "--agent.learner.discont", "0.9"], "--agent.learner.discount"),
    (["eval", "runs/x", "--episode", "3"], "--episodes"),
])
def test_a_mistyped_flag_fails_in_one_line_with_the_closest_flag_first(argv, first, capsys, tmp_path):
    run_dir = tmp_path / "run"
    code, out, err = run_cli([*argv, "--run-dir", str(run_dir)] if argv[0] == "train" else argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    typed = next(arg for arg in argv if arg.startswith("--") and arg != "--preset")
    expected = f"dmpo: error: unrecognized option {typed} for dmpo {argv[0]}; did you mean {first}"
    assert err.startswith(expected), err
    assert not run_dir.exists()


def test_known_flags_in_every_spelling_pass_the_check(monkeypatch, capsys, tmp_path):
    import dmpo.cli.train_command

    trained = []
    monkeypatch.setattr(dmpo.cli.train_command, "_train",
                        lambda config, run_dir, **_: trained.append(config) or
                        {"env_steps": 0, "run_dir": str(run_dir)})
    main(["train", "--agent.batch_size=32", "--no-progress", "--steps", "5000",
          "--run-dir", str(tmp_path / "r")])
    assert trained[0].agent.batch_size == 32 and trained[0].steps == 5000


@pytest.mark.parametrize("name, suggestion", [
    ("dmc:cartpole-swingupp", "dmc:cartpole-swingup"),
    ("dmc:walker_walk", "dmc:walker-walk"),
    ("dmc:cheeta-run", "dmc:cheetah-run"),
    ("dmcc:cartpole-swingup", "dmc:cartpole-swingup"),
    ("Gym:Pendulum-v1", "gym:Pendulum-v1"),
])
def test_a_mistyped_task_names_the_closest_task(name, suggestion):
    from dmpo.envs import EnvError, make

    with pytest.raises(EnvError) as error:
        make(name)
    message = str(error.value)
    assert f"did you mean {suggestion}" in message and len(message) < 200, message  # not the whole suite


def test_a_task_far_from_any_still_lists_the_suite():
    from dmpo.envs import EnvError, available_tasks, make

    with pytest.raises(EnvError) as error:
        make("dmc:zzzz")
    assert "did you mean" not in str(error.value)
    assert all(task.removeprefix("dmc:") in str(error.value) for task in available_tasks())


def test_check_env_says_the_closest_task(capsys):
    code, _, err = run_cli(["check-env", "dmc:cartpole-swingupp"], capsys)
    assert code == 2 and "did you mean dmc:cartpole-swingup?" in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------ warnings once


def _warn_about_support(capsys):
    from dmpo.agent.learning.support_monitor import ROWS, THRESHOLD, SupportMonitor

    monitor = SupportMonitor(-150.0, 150.0)
    for _ in range(ROWS + 3):
        monitor.observe({"critic/outside_mass": THRESHOLD + 0.3})
    return monitor.warning, capsys.readouterr().err


@pytest.mark.parametrize("handler", ["none", "console", "file"])
def test_the_critic_support_warning_reaches_the_terminal_once(handler, capsys, tmp_path):
    root = logging.getLogger()
    # pytest's own capture handlers write to buffers, not to the terminal: out of the way here.
    saved = root.handlers[:]
    root.handlers = []
    added = {"none": None, "console": logging.StreamHandler(sys.stderr),
             "file": logging.FileHandler(tmp_path / "log.txt")}[handler]
    if added is not None:
        root.addHandler(added)
    try:
        warning, err = _warn_about_support(capsys)
    finally:
        if added is not None:
            root.removeHandler(added)
            added.close()
        root.handlers = saved
    assert warning is not None
    assert err.count("returns exceed the critic's support") == 1, err
    if handler == "file":
        assert (tmp_path / "log.txt").read_text().count("returns exceed the critic's support") == 1


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A finished tiny run: 400 env steps of Pendulum, checkpoints every 100, evaluated at the end."""
    run = tmp_path_factory.mktemp("first-hour") / "run"
    main(["train", "--env", "gym:Pendulum-v1", "--steps", "400", "--eval-every", "400",
              "--eval-episodes", "1", "--checkpoint-every", "100", "--keep-checkpoints", "4",
          "--run-dir", str(run), "--no-progress", *TINY])
    return run


def test_a_run_without_videos_has_no_videos_folder(trained_run):
    assert (trained_run / "snapshots").is_dir() and not (trained_run / "videos").exists()


def test_eval_of_one_episode_says_episode(trained_run, capsys):
    main(["eval", str(trained_run), "--episodes", "1"])
    out = capsys.readouterr().out
    assert "over 1 episode," in out and "episodes" not in out, out


def test_a_corrupt_newest_checkpoint_is_reported_in_one_line(trained_run, tmp_path):
    """The resume falls back to the previous checkpoint and says so once: no second, raw
    RuntimeWarning with a source line when the corrupt folder is moved aside at the next save."""
    import shutil

    from dmpo.lifecycle.checkpoints import TrainingCheckpoints

    run = tmp_path / "my run"  # a space in the path, as in many home folders
    shutil.copytree(trained_run, run)
    newest = TrainingCheckpoints(run / "checkpoints").paths()[-1]
    (learner_file,) = (newest / "learner").glob("*.ckpt")
    learner_file.write_bytes(learner_file.read_bytes()[:-10])
    names = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           **{name: os.environ[name] for name in names if name in os.environ}}
    command = [sys.executable, "-m", "dmpo.cli", "train", "--resume", str(run), "--steps", "500",
               "--no-progress"]
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    about_it = [line for line in resumed.stderr.splitlines() if newest.name in line]
    assert len(about_it) == 1 and about_it[0].startswith("dmpo: warning: skipping unusable checkpoint"), \
        resumed.stderr
    assert "RuntimeWarning" not in resumed.stderr and "warnings.warn" not in resumed.stderr, resumed.stderr
    assert not newest.exists()  # moved aside at the first save, as before: only not said twice


# ----------------------------------------------------------------------------- 40 columns, the ETA


def test_evaluation_forms_shorten_to_fit_the_width():
    returns = [810.0, 814.6]  # mean 812.3, population std 2.3
    assert format_evaluation(40_000, returns) == "eval @ 40,000: 812.3 ± 2.3 over 2 episodes"
    assert format_evaluation(40_000, returns, 40) == "eval @ 40,000: 812.3 ± 2.3 (2 ep)"
    assert format_evaluation(1_500_000, returns, 30) == "eval @ 1.5M: 812.3 ± 2.3"
    assert format_evaluation(7, [1.0], 80) == "eval @ 7: 1.0 ± 0.0 over 1 episode"


def test_nothing_wraps_on_a_40_column_terminal():
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=40, color_system=None)
    clock = Clock()
    with Progress(10_000_000, force=True, console=console, clock=clock) as progress:
        progress.update(env_steps=5_000, episodes=5, learner_steps=0)
        clock.now = 60.0
        progress.update(env_steps=1_250_000, episodes=1250, last_return=-1234.5, learner_steps=100_000)
        clock.now = 120.0
        progress.update(env_steps=2_500_000, episodes=2500, last_return=-1234.5, learner_steps=200_000)
        progress.evaluation(2_500_000, [-1234.56, -1300.25, -999.0, -1010.5, -1100.0])
        status = progress.status_line(40)
    lines = [line for line in buffer.getvalue().replace("\r", "\n").splitlines() if line.strip()]
    import re

    visible = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line) for line in lines]
    assert visible and all(len(line) <= 40 for line in visible), visible
    assert any(line.startswith("eval @ ") and ": -1128.9 ± " in line for line in visible), visible
    assert len(status) <= 40 and "ETA" in status and status.startswith("2.5M/10M steps 25%"), status


def test_no_eta_before_learning_then_one_from_the_learning_rate():
    clock = Clock()
    progress = Progress(100_000, live=False, clock=clock, print_fn=lambda line: None)
    progress.update(env_steps=500, episodes=1, learner_steps=0)
    clock.now = 1.0
    progress.update(env_steps=1_000, episodes=2, learner_steps=0)  # replay filling: fast, no updates
    assert "ETA" not in progress.status_line(200) and progress.eta_seconds() is None
    clock.now = 2.0
    progress.update(env_steps=1_000, episodes=2, learner_steps=1)  # learning starts here
    assert progress.eta_seconds() is None  # no rate yet
    clock.now = 62.0
    progress.update(env_steps=2_000, episodes=4, learner_steps=500)
    # 1,000 steps in the 60 s since learning started: the 98,000 left take 98 minutes, not the
    # 98 seconds the pre-learning rate (1,000 steps/s) would promise.
    assert progress.eta_seconds() == pytest.approx(98_000 * 60 / 1_000)
    assert "ETA 1:38:00" in progress.status_line(200)


# ------------------------------------------------------------------------------------ plot legends


def _run_with_vmax(root: Path, name: str, vmax: float) -> Path:
    from dmpo.config import DMPOConfig, NetworkConfig, TrainConfig
    from dmpo.lifecycle.directory import RunDirectory
    from dmpo.reporting.logging import CSVLogger

    config = TrainConfig(agent=DMPOConfig(networks=NetworkConfig(vmin=-10.0, vmax=vmax)))
    run = RunDirectory.create(root / name, config, seed=0)
    logger = CSVLogger(run.path, "evaluator")
    for step in (100, 200):
        logger.write({"actor_steps": step, "return_mean": 1.0})
    logger.close()
    return run.path


def test_legends_round_floats_unless_that_merges_two_settings(tmp_path):
    from dmpo.reporting.plotting import group_runs

    runs = [_run_with_vmax(tmp_path, "a", 162.32634255290017), _run_with_vmax(tmp_path, "b", 1250.0)]
    assert sorted(group_runs(runs)) == ["vmax=1250", "vmax=162.3"]
    close = [_run_with_vmax(tmp_path, "c", 162.32634255290017), _run_with_vmax(tmp_path, "d", 162.3261)]
    assert sorted(group_runs(close)) == ["vmax=162.3261", "vmax=162.32634255290017"]


# ---------------------------------------------------------------------------------- --resume --help


def test_resume_help_names_every_field_a_resume_may_change(capsys):
    code, out, _ = run_cli(["train", "--help"], capsys)
    assert code == 0
    text = " ".join(out.replace("│", " ").split())
    start = text.index("--resume")
    block = text[start:text.index("(default: None)", start)]
    flags = ["--" + name.replace("_", "-") for name in RESUMABLE_FIELDS]
    assert all(flag in block for flag in flags), (flags, block)
