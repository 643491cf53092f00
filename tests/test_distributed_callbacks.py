"""Callbacks, the best policy, stop at a return and a tracker in the distributed program:
they run in the driver, from the evaluator's round summaries and the nodes' CSV logs."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

pytest.importorskip("ray")

import ray  # noqa: E402

import wandb_records  # noqa: E402
from dmpo.agent.policies.snapshot import load_policy  # noqa: E402
from dmpo.distributed import run_distributed  # noqa: E402
from dmpo.lifecycle.callbacks import Callback, read_best  # noqa: E402
from dmpo.utils.seeds import evaluation_seed  # noqa: E402
from test_distributed import fake_environment, options, train_config  # noqa: E402

pytestmark = pytest.mark.ray


def episode_return(env) -> float:
    timestep, total = env.reset(), 0.0
    while not timestep.last():
        timestep = env.step(np.zeros(1, np.float32))
        total += float(timestep.reward)
    return total


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.node_secrets: list[object] = []

    def on_train_start(self, run):
        self.events.append(("start", run.resumed))

    def on_evaluation(self, run, row):
        self.events.append(("evaluation", dict(row)))

    def on_checkpoint(self, run, row):
        self.events.append(("checkpoint", row["env_steps"]))

    def on_train_end(self, run, summary):
        self.events.append(("end", summary["stop_reason"]))


def test_callbacks_run_in_the_driver_stop_the_program_and_keep_the_best_policy(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_API_KEY", "not-a-real-key-" + "0" * 24)
    recorder = Recorder()

    def node_environment(program):  # what a process Ray starts for the run sees
        if not recorder.node_secrets:
            probe = ray.remote(num_cpus=0)(lambda: os.environ.get("WANDB_API_KEY"))
            recorder.node_secrets.append(ray.get(probe.remote(), timeout=60))

    run_dir = tmp_path / "run"
    config = train_config(actors=1, eval_every=100, checkpoint_every=100, stop_at_return=-1e6, track="wandb")
    result = run_distributed(config, run_dir, env_factory=fake_environment, num_cpus=2, progress=False,
                             options=options(max_learner_steps=5000), callbacks=[recorder],
                             on_poll=node_environment)

    assert result.status == "finished" and "stop_at_return" in result.stop_reason, result.stop_reason
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["status_reason"] == result.stop_reason
    kinds = [kind for kind, _ in recorder.events]
    # The driver sends the next round only after the callbacks saw the previous row: the stop comes
    # after the first round, as in one process, however many boundaries the actors crossed meanwhile.
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("evaluation") == 1, kinds
    assert "checkpoint" in kinds  # the checkpoint asked for at the 100-step boundary
    rows = [value for kind, value in recorder.events if kind == "evaluation"]
    assert rows[0]["actor_steps"] >= 100 and set(rows[0]) >= {"return_mean", "return_std", "learner_steps"}
    # The round ran on an environment of its own, seeded as one process seeds its first evaluation
    # (the fake task's rewards do not depend on the actions, so any policy scores that seed's return).
    assert rows[0]["return_mean"] == pytest.approx(episode_return(fake_environment(evaluation_seed(3, 0))))
    assert result.stop_reason.endswith(f"at {rows[0]['actor_steps']} env steps")  # the first round
    # The best policy is the parameters the best round scored.
    best_row = max(rows, key=lambda row: row["return_mean"])
    best = read_best(run_dir)
    assert best["return_mean"] == pytest.approx(best_row["return_mean"])
    assert best["actor_steps"] == best_row["actor_steps"]
    policy = load_policy(run_dir / "snapshots" / "best.msgpack")
    assert policy.metadata["learner_steps"] == best_row["learner_steps"] == best["learner_steps"]
    # The tracker got the nodes' rows (followed in their CSV logs); the key never reached a node.
    assert recorder.node_secrets == [None]
    with open(run_dir / "logs" / "evaluator" / "logs.csv", newline="") as f:
        logged = [float(r["return_mean"]) for r in csv.DictReader(f)]  # one row per round
    (wandb_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    tracked = [r["evaluator/return_mean"] for r in wandb_records.history(wandb_file)
               if "evaluator/return_mean" in r]
    assert logged and tracked == pytest.approx(logged)
    assert "not-a-real-key" not in "".join(p.read_text(errors="replace") for p in run_dir.rglob("*")
                                           if p.is_file() and p.suffix in (".json", ".log", ".csv", ".yaml"))
