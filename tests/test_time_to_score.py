"""Time to score: wall_seconds in evaluation rows (carried across resume), the TensorBoard fallback for
older runs, and the first evaluation at or above a threshold."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import shutil
import time

import numpy as np
import pytest
from tensorboardX import SummaryWriter

from benchtools.time_to_score import (
    EvaluationTimes,
    evaluation_times,
    parse_thresholds,
    tensorboard_wall_seconds,
    time_to_score,
)
from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs import FakeEnvironment
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from dmpo.run.run import train

TINY = DMPOConfig(batch_size=8, samples_per_insert=2.0, min_replay_size=10, max_replay_size=500, n_step=2,
                  learner=LearnerConfig(num_samples=2),
                  networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5))


def rows(run):
    with open(run / "logs" / "evaluator" / "logs.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_wall_seconds_runs_on_across_resume_and_old_checkpoints_load(tmp_path):
    env_factory = lambda seed: FakeEnvironment(observation_shape=(2,), action_dim=1,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    config = TrainConfig(env="test:fake", steps=60, seed=0, eval_every=20, eval_episodes=1,
                         checkpoint_every=60, agent=TINY)
    run = tmp_path / "run"
    train(config, run, env_factory=env_factory, progress=False, quiet=True)
    first = [float(r["wall_seconds"]) for r in rows(run)]
    assert len(first) == 3 and 0 < first[0] < first[1] < first[2]
    saved = json.loads((TrainingCheckpoints(run / "checkpoints").latest() / "state.json").read_text())
    assert saved["wall_seconds"] >= first[-1]

    # Extend the run: its new evaluations count on from the checkpoint's wall_seconds.
    train(dataclasses.replace(config, steps=100), run, resume=True, env_factory=env_factory, progress=False,
          quiet=True)
    later = [float(r["wall_seconds"]) for r in rows(run)][3:]
    assert len(later) == 2 and saved["wall_seconds"] < later[0] < later[1]

    # A checkpoint written before the field existed still resumes (its clock starts at 0).
    old = tmp_path / "old"
    shutil.copytree(run, old)
    state_file = TrainingCheckpoints(old / "checkpoints").latest() / "state.json"
    state = json.loads(state_file.read_text())
    del state["wall_seconds"]
    state_file.write_text(json.dumps(state))
    started = time.monotonic()
    train(dataclasses.replace(config, steps=120), old, resume=True, env_factory=env_factory, progress=False,
          quiet=True)
    elapsed = time.monotonic() - started
    # Bounded by this call's own duration, not by the first run's clock: how long the resume's start-up takes
    # depends on the machine (CI's once took longer than the whole first run).
    assert len(rows(old)) == 6 and 0 < float(rows(old)[-1]["wall_seconds"]) <= elapsed


def write_events(folder, points):
    """An evaluator event file written by tensorboardX, with chosen wall times."""
    writer = SummaryWriter(str(folder))
    for step, wall, value in points:
        writer.add_scalar("return_mean", value, step, walltime=wall)
    writer.close()


def write_run_json(run, start):
    started = datetime.datetime.fromtimestamp(start, datetime.UTC).isoformat(timespec="seconds")
    (run / "run.json").write_text(json.dumps({"start_time": started}))


def test_tensorboard_fallback_counts_each_process_and_drops_replaced_steps(tmp_path):
    run = tmp_path / "run"
    folder = run / "tb" / "evaluator"
    folder.mkdir(parents=True)
    start = float(int(time.time())) - 20_000
    write_run_json(run, start)
    # First process: evaluations at 100 s, 200 s, 300 s; killed after a checkpoint at step 2000,
    # so its step-3000 evaluation is done again by the resumed process, which starts hours later.
    write_events(folder, [(1000, start + 100, 1.0), (2000, start + 200, 2.0), (3000, start + 300, 3.0)])
    time.sleep(1.1)  # tensorboardX names event files by the second
    resumed = time.time()  # the second file's first record (file_version) is written now
    write_events(folder, [(3000, resumed + 50, 3.5), (4000, resumed + 150, 4.0)])
    assert len(list(folder.iterdir())) == 2
    times = tensorboard_wall_seconds(run)
    assert times[1000] == pytest.approx(100) and times[2000] == pytest.approx(200)
    # The first process counts to its last kept evaluation (200 s); the pause is not counted.
    assert times[3000] == pytest.approx(250, abs=2) and times[4000] == pytest.approx(350, abs=2)


def test_time_to_score_picks_the_first_evaluation_at_or_above_the_threshold():
    times = EvaluationTimes(np.array([10, 20, 30, 40]), np.array([5.0, 9.0, 7.0, 12.0]),
                            np.array([60.0, 120.0, 180.0, 240.0]), "log")
    assert time_to_score(times, 9.0) == (20, 120.0)  # at, not only above
    assert time_to_score(times, 10.0) == (40, 240.0)  # the dip at 30 does not count
    assert time_to_score(times, 13.0) is None
    untimed = dataclasses.replace(times, wall_seconds=None, source="none")
    assert time_to_score(untimed, 6.0) == (20, None)


def test_thresholds_parse_and_refuse_malformed_items():
    thresholds = parse_thresholds(["dmc:walker-walk=750", "gym:Hopper-v5=1000"])
    assert thresholds["dmc:walker-walk"] == 750 and thresholds["gym:Hopper-v5"] == 1000
    assert thresholds["dmc:cartpole-swingup"] == 800  # defaults kept
    for bad in ["dmc:walker-walk", "walker=3", "dmc:walker-walk=high"]:
        with pytest.raises(ValueError, match="TASK=VALUE"):
            parse_thresholds([bad])


def test_reader_handles_a_run_logged_before_the_wall_seconds_column(tmp_path):
    """An evaluator log without wall_seconds takes its times from TensorBoard."""
    run = tmp_path / "run"
    (run / "logs" / "evaluator").mkdir(parents=True)
    (run / "logs" / "evaluator" / "logs.csv").write_text(
        "return_mean,actor_steps\n20.5,5000\n39.4,10000\n")
    start = float(int(time.time())) - 5000
    write_run_json(run, start)
    write_events(run / "tb" / "evaluator", [(5000, start + 250, 20.5), (10000, start + 1069, 39.4)])
    times = evaluation_times(run)
    assert times.source == "tensorboard"
    np.testing.assert_allclose(times.wall_seconds, [250, 1069])
    assert time_to_score(times, 30) == (10000, pytest.approx(1069))
