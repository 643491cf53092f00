"""The same `dmpo train` flags in one process and with `--actors 1` leave the same run folder.

Both real commands run on cartpole with action repeat 8 (125-step episodes, so the 500-step boundaries
fall on episode ends in both modes) and tiny networks. Compared: the evaluator's step column (rounds
at the same boundaries, labelled with the steps they evaluated, none replayed after training), the
log labels, the checkpoints (one final checkpoint, no second copy of it), the status line, the run
status and the videos (`--video-every`: the same evaluation filmed, from an environment seeded alike).
The flags normalise observations by running statistics, so that the same runs show that feature in
both modes (the learner merges them, the snapshot the actors' policy is written from carries them).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dmpo
from dmpo.agent.networks.normalization import STATISTICS
from test_cli import TINY, jax_cache_env

pytestmark = pytest.mark.ray  # the `--actors 1` run starts a private cluster

FLAGS = ["--steps", "1500", "--eval-every", "500", "--checkpoint-every", "500", "--keep-checkpoints", "5",
         "--action-repeat", "8", "--eval-episodes", "1", "--video-every", "1000",
         "--agent.networks.normalize-observations", *TINY]


def _train(run, *extra):
    source = str(Path(dmpo.__file__).parents[1])  # the dmpo under test, in the subprocess too
    env = {"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin", "PYTHONPATH": source, **jax_cache_env()}
    done = subprocess.run([sys.executable, "-m", "dmpo.cli", "train", "--run-dir", str(run), *FLAGS, *extra],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _evaluated_steps(run):
    with open(run / "logs" / "evaluator" / "logs.csv", newline="") as f:
        return [int(float(row["actor_steps"])) for row in csv.DictReader(f)]


def _status_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("train ")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    one, distributed = root / "one", root / "distributed"
    return {"one": (one, _train(one)), "distributed": (distributed, _train(distributed, "--actors", "1"))}


def test_evaluations_are_at_the_same_boundaries_labelled_with_the_steps_they_evaluated(runs):
    one, distributed = runs["one"][0], runs["distributed"][0]
    assert _evaluated_steps(one) == [500, 1000, 1500]
    assert _evaluated_steps(distributed) == [500, 1000, 1500]
    for stdout in (runs["one"][1], runs["distributed"][1]):
        shown = re.findall(r"^eval @ ([\d,]+):", stdout, flags=re.MULTILINE)
        assert shown == ["500", "1,000", "1,500"], stdout


def test_both_modes_log_under_the_same_labels(runs):
    labels = {name: sorted(path.name for path in (run / "logs").iterdir()) for name, (run, _) in runs.items()}
    assert labels["one"] == labels["distributed"] == ["environment_loop", "evaluator", "learner"]


def test_a_finished_run_ends_with_one_final_checkpoint(runs):
    names = {name: sorted(path.name for path in (run / "checkpoints").glob("step_*"))
             for name, (run, _) in runs.items()}
    assert names["one"] == ["step_000000000500", "step_000000001000", "step_000000001500"]
    # The acting node that finds a checkpoint due waits for it, as one process does: with one actor,
    # the same steps.
    assert names["distributed"] == names["one"]


def test_both_modes_print_the_same_status_line_and_end_finished(runs):
    for name, (run, stdout) in runs.items():
        lines = _status_lines(stdout)
        assert lines and re.match(r"train 1,500/1,500 steps .*\| return -?\d", lines[-1]), (name, lines)
        assert json.loads((run / "run.json").read_text())["status"] == "finished", name


def test_both_modes_settle_the_default_support_to_the_references_on_dm_control(runs):
    for name, (run, _) in runs.items():
        networks = json.loads((run / "config.json").read_text())["config"]["agent"]["networks"]
        assert (networks["vmin"], networks["vmax"]) == (-150.0, 150.0), name


def test_both_modes_film_the_same_evaluation_at_the_same_steps(runs):
    """The video boundary at 1,000 films the evaluation there, in both modes, and nothing else (the
    final evaluation at 1,500 has no pending boundary). That the filmed episodes start alike (the same
    evaluation seeds) is held by tests/test_distributed_callbacks.py against one process's rule."""
    for mode in ("one", "distributed"):
        run = runs[mode][0]
        assert sorted(p.name for p in (run / "videos").iterdir()) == ["step_000000001000.mp4"], mode


def test_both_modes_learn_running_observation_statistics_and_snapshot_them(runs):
    for name, (run, _) in runs.items():
        statistics = dmpo.load_policy(run).params.observation[STATISTICS]
        count = float(statistics["count"])
        # Whole batches of 16 merged, one per learner step: at least one target copy after the first.
        assert count >= 16 * 100 and count % 16 == 0, (name, count)
        # cartpole's observation, sorted keys: position (cart x, cos θ, sin θ), velocity (2).
        mean, variance = np.asarray(statistics["mean"]), np.asarray(statistics["variance"])
        assert mean.shape == variance.shape == (5,), name
        assert np.all(np.abs(mean[1:3]) <= 1) and np.all(variance[1:3] <= 1), (name, mean, variance)
        assert np.all(variance > 0), (name, variance)
