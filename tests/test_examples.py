"""examples/: each script run as a user runs it (its `main(argv)`), with a budget of a few hundred env
steps, and checked for what it says it does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flax import serialization

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def examples(monkeypatch):
    """The repository root on sys.path, so that `examples.<name>` imports as the scripts' docs say."""
    monkeypatch.syspath_prepend(str(ROOT))
    import examples  # noqa: F401 - a namespace package of the scripts

    return ROOT / "examples"


def test_own_environment_trains_through_dmpo_train_and_is_an_entry_point(examples, tmp_path):
    from examples import own_environment

    import dmpo

    summary = own_environment.main(["--steps", "400", "--run-dir", str(tmp_path / "run")])
    assert summary["env_steps"] >= 400 and -100.0 <= summary["last_eval"]["return_mean"] <= 0.0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"
    # The same factory by name, as `--env examples.own_environment:make_env` gives it to the CLI.
    env = dmpo.make("examples.own_environment:make_env", seed=0)
    spec = env.action_spec()
    assert spec.shape == (1,) and np.all(spec.minimum == -1.0) and np.all(spec.maximum == 1.0)
    assert env.reset().observation.shape == (2,)


def test_custom_network_trains_the_networks_it_builds(examples, tmp_path):
    from examples import custom_network

    summary = custom_network.main(["--steps", "400", "--run-dir", str(tmp_path / "run")])
    assert summary["env_steps"] >= 400 and np.isfinite(summary["last_eval"]["return_mean"])
    snapshot = serialization.msgpack_restore((tmp_path / "run" / "snapshots" / "policy.msgpack").read_bytes())
    params = snapshot["params"]
    # The encoder (Pendulum's 3 numbers -> 64) and the 128-128 ReLU policy torso, not the configured 64-64.
    assert params["observation"]["params"]["Dense_0"]["kernel"].shape == (3, 64)
    assert params["policy"]["params"]["torso"]["Dense_1"]["kernel"].shape == (128, 128)


def test_small_sweep_runs_every_point_and_seed_and_prints_the_table(examples, tmp_path, capsys):
    from examples import small_sweep

    results = small_sweep.main(["--steps", "300", "--seeds", "0", "1", "--num-samples", "4",
                                "--out", str(tmp_path / "sweep")])
    assert list(results) == [4] and len(results[4]) == 2
    for seed in (0, 1):
        run = tmp_path / "sweep" / "num_samples-4" / f"seed-{seed}"
        config = json.loads((run / "config.json").read_text())["config"]
        assert (config["seed"], config["agent"]["learner"]["num_samples"]) == (seed, 4)
    table = capsys.readouterr().out
    assert f"| 4 | 0, 1 | {np.mean(results[4]):.1f} |" in table
