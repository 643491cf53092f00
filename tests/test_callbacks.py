"""Callbacks, the best-policy snapshot, stop at a return, and the W&B / MLflow trackers."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from dmpo.callbacks import BestPolicy, Callback, CallbackList, RunEvents, StopAtReturn, read_best

import wandb_records
from dmpo.agent.policies.snapshot import load_policy
from dmpo.config import ConfigError, TrainConfig
from dmpo.envs import FakeEnvironment
from dmpo.run.run import train
from dmpo.utils.seeds import evaluation_seed
from test_agent import tiny_config

EVAL_EVERY = 30


def fake_env(seed: int) -> FakeEnvironment:
    return FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=10, seed=seed % 1000)


def evaluation_return(config_seed: int, index: int) -> float:
    """Evaluation `index`'s return, computed independently: the fake task's rewards do not depend on the
    actions, so one episode of the evaluation environment with any policy scores it."""
    env = fake_env(evaluation_seed(config_seed, index))
    timestep, total = env.reset(), 0.0
    while not timestep.last():
        timestep = env.step(np.zeros(1, np.float32))
        total += float(timestep.reward)
    return total


def evaluator_rows(run) -> list[dict[str, str]]:
    with open(run / "logs" / "evaluator" / "logs.csv", newline="") as f:
        return list(csv.DictReader(f))


def csv_evaluations(run) -> list[tuple[int, float]]:
    return [(int(float(row["actor_steps"])), pytest.approx(float(row["return_mean"])))
            for row in evaluator_rows(run)]


def tracked_evaluations(run) -> list[tuple[int, float]]:
    """The evaluator rows W&B recorded, over every offline part of the run, in order."""
    rows = [row for path in sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
            for row in wandb_records.history(path)]
    return [(row["evaluator/actor_steps"], row["evaluator/return_mean"]) for row in rows
            if "evaluator/return_mean" in row]


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_train_start(self, run):
        self.events.append(("start", run.env_steps))

    def on_episode_end(self, run, row):
        self.events.append(("episode", run.env_steps))

    def on_evaluation(self, run, row):
        self.events.append(("evaluation", run.env_steps))

    def on_checkpoint(self, run, row):
        self.events.append(("checkpoint", row["env_steps"]))

    def on_train_end(self, run, summary):
        self.events.append(("end", summary["env_steps"]))


# ----------------------------------------------------------------------------------- built-ins


def test_best_policy_writes_only_improvements_and_keeps_the_record_across_a_resume(tmp_path):
    written = []

    def run_events(resumed):
        (tmp_path / "snapshots").mkdir(exist_ok=True)
        return RunEvents(tmp_path, None, resumed=resumed)

    def evaluate(callbacks, value, steps):
        def write(path):
            written.append((value, path.name))
            path.write_bytes(str(value).encode())
            return path
        callbacks.on_evaluation({"return_mean": value, "actor_steps": steps, "learner_steps": 1}, write)

    first = CallbackList(run_events(False), [BestPolicy()])
    first.on_train_start()
    for steps, value in [(10, 1.0), (20, 3.0), (30, 2.0), (40, float("nan"))]:
        evaluate(first, value, steps)
    assert written == [(1.0, "best.msgpack"), (3.0, "best.msgpack")]
    assert read_best(tmp_path) == {"format": "dmpo.best", "format_version": 1, "return_mean": 3.0,
                                   "actor_steps": 20, "learner_steps": 1}
    resumed = CallbackList(run_events(True), [BestPolicy()])
    resumed.on_train_start()
    evaluate(resumed, 2.5, 30)  # worse than the best before the resume: kept
    best_file = tmp_path / "snapshots" / "best.msgpack"
    assert read_best(tmp_path)["return_mean"] == 3.0 and best_file.read_bytes() == b"3.0"
    evaluate(resumed, 4.0, 40)
    assert read_best(tmp_path)["return_mean"] == 4.0 and best_file.read_bytes() == b"4.0"


def test_stop_at_return_and_callbacks_answering_true_ask_the_run_to_stop(tmp_path):
    events = RunEvents(tmp_path, None)
    callbacks = CallbackList(events, [StopAtReturn(5.0)])
    assert not callbacks.on_evaluation({"return_mean": 4.99, "actor_steps": 10})
    assert callbacks.on_evaluation({"return_mean": 5.0, "actor_steps": 20})
    assert events.stop_reason == "evaluation return 5.0 >= stop_at_return 5 at 20 env steps"

    class Enough(Callback):
        def on_episode_end(self, run, row):
            return row["episode_return"] > 1

    other = CallbackList(RunEvents(tmp_path, None), [Enough()])
    assert not other.on_episode_end({"episode_return": 0.5, "actor_steps": 10})
    assert other.on_episode_end({"episode_return": 2.0, "actor_steps": 20})
    assert other.run.stop_reason == "Enough.on_episode_end asked to stop"
    with pytest.raises(TypeError, match="Callback instances"):
        CallbackList(events, [object()])


def test_stop_at_return_needs_evaluations_and_a_finite_number():
    with pytest.raises(ConfigError, match="TrainConfig.stop_at_return"):
        TrainConfig(stop_at_return=1.0, eval_every=0)
    with pytest.raises(ConfigError, match="TrainConfig.stop_at_return"):
        TrainConfig(stop_at_return=float("inf"))
    with pytest.raises(ConfigError, match="TrainConfig.track"):
        TrainConfig(track="tensorboard")  # type: ignore[arg-type]


# ----------------------------------------------------------------------- a whole run, resumed


def test_a_run_stops_at_the_return_keeps_the_best_policy_in_wandb_and_resumes(tmp_path, monkeypatch):
    """`--stop-at-return` with `--track wandb` (offline): stops after the first evaluation at or above
    the target, keeps best.msgpack, and `--resume` continues the same W&B run."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    seed = 0
    returns = [evaluation_return(seed, index) for index in range(8)]
    # The first evaluation after the first one that beats every earlier one: the run must stop there.
    stop_index = next(k for k in range(1, 8) if returns[k] > max(returns[:k]))
    target = returns[stop_index]
    config = TrainConfig(env="test:fake", steps=10 * EVAL_EVERY, seed=seed, eval_every=EVAL_EVERY,
                         eval_episodes=1, checkpoint_every=0, stop_at_return=target, track="wandb",
                         track_project="dmpo-tests",
                         agent=tiny_config(min_replay_size=20, max_replay_size=500))
    run = tmp_path / "run"
    recorder = Recorder()
    summary = train(config, run, env_factory=fake_env, progress=False, quiet=True, callbacks=[recorder])

    stop_step = (stop_index + 1) * EVAL_EVERY
    assert summary["env_steps"] == stop_step, (returns, stop_index)
    assert "stop_at_return" in summary["stop_reason"]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and info["status_reason"] == summary["stop_reason"]
    logged = [float(row["return_mean"]) for row in evaluator_rows(run)]
    assert logged == pytest.approx(returns[:stop_index + 1])
    # The final checkpoint is at the stop, and the callbacks saw the run in order.
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"step_{stop_step:012d}"]
    evaluations = [step for kind, step in recorder.events if kind == "evaluation"]
    assert evaluations == [EVAL_EVERY * (k + 1) for k in range(stop_index + 1)]
    assert recorder.events[0] == ("start", 0) and recorder.events[-2:] == [("checkpoint", stop_step),
                                                                          ("end", stop_step)]
    assert sum(kind == "episode" for kind, _ in recorder.events) == stop_step // 10
    # The best policy is the one evaluated last (nothing learned since), and best.json names it.
    assert read_best(run)["return_mean"] == pytest.approx(target)
    assert read_best(run)["actor_steps"] == stop_step
    best, latest = load_policy(run / "snapshots" / "best.msgpack"), load_policy(run)
    observation = np.array([0.3, -0.7], np.float32)
    np.testing.assert_array_equal(best(observation), latest(observation))
    # W&B (offline) got the run's rows and config, and its id is kept for a resume.
    wandb_id = info["tracker"]["id"]
    (offline,) = (run / "wandb").glob(f"offline-run-*-{wandb_id}/run-{wandb_id}.wandb")
    assert wandb_records.config(offline)["stop_at_return"] == pytest.approx(target)
    assert tracked_evaluations(run) == csv_evaluations(run)

    # A resume with the same target stops at once (the best so far reached it) and keeps everything.
    again = train(config, run, resume=True, env_factory=fake_env, progress=False, quiet=True)
    assert again["env_steps"] == stop_step and "stop_at_return" in again["stop_reason"]
    # A resume with a higher target trains on; the best is replaced only by a better evaluation.
    higher = TrainConfig(**{**config.__dict__, "stop_at_return": 1e9, "steps": stop_step + 2 * EVAL_EVERY})
    resumed = train(higher, run, resume=True, env_factory=fake_env, progress=False, quiet=True)
    assert resumed["env_steps"] == stop_step + 2 * EVAL_EVERY and resumed["stop_reason"] is None
    later = returns[stop_index + 1:stop_index + 3]
    assert [float(row["return_mean"]) for row in evaluator_rows(run)][-2:] == pytest.approx(later)
    assert read_best(run)["return_mean"] == pytest.approx(max(target, *later))
    info = json.loads((run / "run.json").read_text())
    assert info["tracker"]["id"] == wandb_id and info["status_reason"] is None
    # Three parts of one W&B run (wandb names a part started in the same second as another `...-<id>-1`).
    parts = [p.name for p in (run / "wandb").glob("offline-run-*")]
    assert len(parts) == 3 and all(f"-{wandb_id}" in name for name in parts), parts
    assert tracked_evaluations(run) == csv_evaluations(run)  # the three parts of one W&B run


def test_mlflow_tracker_gets_the_rows_and_continues_its_run_on_resume(tmp_path, monkeypatch):
    import mlflow

    from dmpo.lifecycle.directory import RunDirectory
    from dmpo.reporting.trackers import open_tracker

    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the test's store; users point at a server
    config = TrainConfig(env="test:fake", steps=2 * EVAL_EVERY, eval_every=EVAL_EVERY, eval_episodes=1,
                         checkpoint_every=0, track="mlflow", track_project="dmpo-tests",
                         agent=tiny_config(min_replay_size=20, max_replay_size=500))
    run = tmp_path / "run"
    train(config, run, env_factory=fake_env, progress=False, quiet=True)
    run_id = json.loads((run / "run.json").read_text())["tracker"]["id"]
    resumed = open_tracker(config, RunDirectory.open(run))  # what a resumed trainer opens
    assert resumed.run_id == run_id
    resumed.log_row("evaluator", {"actor_steps": 90, "return_mean": 1.5})
    resumed.close()
    assert json.loads((run / "run.json").read_text())["tracker"]["id"] == run_id

    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    history = client.get_metric_history(run_id, "evaluator/return_mean")
    assert sorted((m.step, m.value) for m in history) == [*csv_evaluations(run), (90, 1.5)]
    tracked = client.get_run(run_id)
    assert tracked.data.params["env"] == "test_callbacks:fake_env"  # the factory's recorded name
    assert tracked.data.params["agent.batch_size"] == "10"
    assert tracked.info.status == "FINISHED"
    (experiment,) = [e for e in client.search_experiments() if e.name == "dmpo-tests"]
    assert tracked.info.experiment_id == experiment.experiment_id


def test_a_missing_tracker_package_is_a_one_line_error_before_the_run_starts(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def without_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_wandb)
    config = TrainConfig(env="test:fake", steps=20, track="wandb", agent=tiny_config())
    hint = r"pip install 'dmpo-jax\[wandb\]' \(from a checkout: pip install -e '\.\[wandb\]'\)"
    with pytest.raises(ConfigError, match=hint):
        train(config, tmp_path / "run", env_factory=fake_env, progress=False, quiet=True)
    assert not (tmp_path / "run").exists()


def test_eval_best_evaluates_the_best_snapshot_of_a_run(tmp_path, capsys):
    from dmpo.cli.main import main
    from test_cli import gym_snapshot, run_cli

    run = tmp_path / "run"
    code, output = run_cli(["eval", str(run), "--best"], capsys)
    assert code == 2 and "--best needs a run directory" in output
    run.mkdir()
    code, output = run_cli(["eval", str(run), "--best"], capsys)
    assert code == 2 and "best.msgpack does not exist" in output, output
    gym_snapshot(run, "gym:InvertedPendulum-v5").rename(run / "snapshots" / "best.msgpack")
    gym_snapshot(run, "gym:Pendulum-v1")  # the latest policy, of another task so the two are told apart
    main(["eval", str(run), "--best", "--episodes", "1"])
    assert capsys.readouterr().out.startswith("gym:InvertedPendulum-v5: return")
    main(["eval", str(run), "--episodes", "1"])
    assert capsys.readouterr().out.startswith("gym:Pendulum-v1: return")


def test_trackers_take_evaluation_videos(tmp_path, monkeypatch):
    import imageio.v3 as iio
    import mlflow

    from dmpo.lifecycle.directory import RunDirectory
    from dmpo.reporting.trackers import open_tracker

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    video = tmp_path / "evaluation.gif"
    iio.imwrite(video, np.random.default_rng(0).integers(0, 255, (3, 8, 8, 3), dtype=np.uint8))
    for kind in ("wandb", "mlflow"):
        config = TrainConfig(env="test:fake", track=kind, agent=tiny_config())
        tracker = open_tracker(config, RunDirectory.create(tmp_path / kind, config))
        tracker.log_video(video, "evaluator", step=30)
        tracker.close()
    (wandb_file,) = (tmp_path / "wandb" / "wandb").glob("offline-run-*/run-*.wandb")
    (row,) = [r for r in wandb_records.history(wandb_file) if "evaluator/video/_type" in r]
    assert row["evaluator/video/_type"] == "video-file" and row["evaluator/actor_steps"] == 30
    assert row["evaluator/video/path"].endswith(".gif")
    run_id = json.loads((tmp_path / "mlflow" / "run.json").read_text())["tracker"]["id"]
    client = mlflow.tracking.MlflowClient()
    artifacts = client.list_artifacts(run_id, "videos/evaluator")
    assert [a.path for a in artifacts] == ["videos/evaluator/evaluation.gif"]
