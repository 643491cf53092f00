"""What a shipped policy's files promise: permissions that follow the umask, older snapshots that still
load, the ONNX opset asked for, batched and dict observations, and `DMPO.save`/`load` of num_envs."""

from __future__ import annotations

import contextlib
import os
import stat
import warnings

import jax
import numpy as np
import pytest
from flax import serialization

import dmpo
from dmpo import DMPO
from dmpo.agent.policies.export import ExportError, export_policy
from dmpo.agent.policies.snapshot import load_policy
from dmpo.cli.main import main
from dmpo.config import DMPOConfig, LearnerConfig
from dmpo.envs import FakeEnvironment, make, make_environment_spec
from dmpo.envs.interface import TaskInterface, task_interface
from test_export import CASES, STATES, make_snapshot

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")


@contextlib.contextmanager
def umask(mask: int):
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_exports_and_snapshots_follow_the_umask(mask, expected, tmp_path):
    with umask(mask):
        snapshot = make_snapshot(tmp_path / "run" / "snapshots" / "policy.msgpack", *CASES["states"])
        onnx_file = export_policy(tmp_path / "run", tmp_path / "policy.onnx", "onnx")
        hlo_file = export_policy(tmp_path / "run", tmp_path / "policy.stablehlo", "stablehlo")
    for path in (snapshot, onnx_file, hlo_file, tmp_path / "policy.stablehlo.json"):
        assert mode(path) == expected, (path, oct(mode(path)))


def test_a_training_run_keeps_its_records_readable_under_umask_022(tmp_path):
    env_factory = lambda seed: FakeEnvironment(observation_shape=(3,), action_dim=2,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    agent = DMPOConfig(batch_size=8, samples_per_insert=2.0, min_replay_size=10, max_replay_size=500,
                       learner=LearnerConfig(num_samples=2), networks=STATES)
    config = dmpo.TrainConfig(env="test:fake", steps=20, seed=0, eval_every=20, eval_episodes=1, agent=agent)
    with umask(0o022):
        dmpo.train(config, tmp_path / "run", env_factory=env_factory, progress=False, quiet=True)
    for name in ("config.json", "run.json", "snapshots/policy.msgpack"):
        assert mode(tmp_path / "run" / name) == 0o644, name
    checkpoints = list((tmp_path / "run" / "checkpoints").iterdir())
    assert checkpoints and {mode(path) for path in checkpoints} == {0o755}  # as mkdir would make them


def test_saved_agents_keep_num_envs_and_follow_the_umask(tmp_path):
    env = FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=5, seed=1)
    config = DMPOConfig(batch_size=4, samples_per_insert=2.0, min_replay_size=4, max_replay_size=100,
                        learner=LearnerConfig(num_samples=2), networks=STATES)
    agent = DMPO(make_environment_spec(env), config, seed=0, num_envs=3)
    with umask(0o022):
        agent.save(tmp_path / "agent")
    assert mode(tmp_path / "agent") == 0o755 and mode(tmp_path / "agent" / "agent.json") == 0o644
    loaded = DMPO.load(tmp_path / "agent")
    assert len(loaded.adders) == 3
    timesteps = [FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=5, seed=i).reset()
                 for i in range(3)]
    for index, timestep in enumerate(timesteps):
        loaded.observe_first(timestep, env=index)
    step = FakeEnvironment(observation_shape=(2,), action_dim=1, episode_length=5, seed=2)
    step.reset()
    action = loaded.select_action(timesteps[2].observation)
    loaded.observe(action, step.step(action), env=2)  # raised IndexError with one adder
    loaded.close()
    agent.close()


def test_version_one_snapshots_load_with_canonical_bounds_and_one_warning(tmp_path):
    path = make_snapshot(tmp_path / "policy.msgpack", *CASES["states"])
    payload = serialization.msgpack_restore(path.read_bytes())
    del payload["format_version"]  # the header version 1 was written with
    payload.update(format="dmpo-policy-snapshot", version=1)
    for key in ("task", "observation_input"):
        del payload[key]
    old = tmp_path / "old.msgpack"
    old.write_bytes(serialization.msgpack_serialize(payload))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy = load_policy(old)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1 and "version-1" in messages[0] and "[-1, 1]" in messages[0]
    assert policy.task == TaskInterface((-1.0, -1.0), (1.0, 1.0), "float32", 1, 1)
    current = load_policy(path)
    observation = {"velocity": np.full(3, 0.7, np.float32), "position": np.full((2, 2), -0.4, np.float32)}
    np.testing.assert_array_equal(policy(observation), current(observation))


def test_pipeline_environments_report_their_task_interface():
    pendulum = make("gym:Pendulum-v1", seed=0, action_repeat=3)
    assert task_interface(pendulum) == TaskInterface((-2.0,), (2.0,), "float32", 3, 1)
    spec = make_environment_spec(pendulum)
    assert spec.task == task_interface(pendulum)
    assert spec.actions.minimum == -1.0  # the agent still acts in the canonical box
    # Outside the pipeline there is nothing between the agent and the task.
    assert task_interface(FakeEnvironment(observation_shape=(2,), action_dim=1)) is None


def test_the_opset_is_the_one_asked_for_and_bad_ones_fail_before_any_work(tmp_path, capsys):
    make_snapshot(tmp_path / "run" / "snapshots" / "policy.msgpack", *CASES["states"])
    output = tmp_path / "policy.onnx"
    main(["export", str(tmp_path / "run"), "--format", "onnx", "--opset", "17", "-o", str(output)])
    model = onnx.load(str(output))
    assert [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")] == [17]
    session = onnxruntime.InferenceSession(str(output))
    (actions,) = session.run(["action"], {"observation": np.zeros((2, 7), np.float32)})
    assert actions.shape == (2, 2)
    for bad in (5, 10_000):
        with pytest.raises(ExportError, match=r"^--opset must be an integer from 15 to \d+"):
            export_policy(tmp_path / "run", tmp_path / "other.onnx", "onnx", opset=bad)
    with pytest.raises(ExportError, match="--opset is for --format onnx"):
        export_policy(tmp_path / "run", tmp_path / "other.stablehlo", "stablehlo", opset=17)
    assert not (tmp_path / "other.onnx").exists() and not (tmp_path / "other.stablehlo").exists()


def test_loaded_policies_take_dict_batches_and_lists(tmp_path):
    path = make_snapshot(tmp_path / "policy.msgpack", *CASES["states"])
    policy = load_policy(path)
    rng = np.random.default_rng(0)
    singles = [{"velocity": rng.normal(size=3).astype(np.float32),
                "position": rng.normal(size=(2, 2)).astype(np.float32)} for _ in range(5)]
    batch = jax.tree_util.tree_map(lambda *rows: np.stack(rows), *singles)
    expected = np.stack([policy(single) for single in singles])
    np.testing.assert_allclose(policy(batch), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(policy(singles), expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="observation: expected one observation"):
        policy({"velocity": np.zeros(4, np.float32), "position": np.zeros((2, 2), np.float32)})
    stochastic = load_policy(path, deterministic=False, seed=1)
    one_by_one = np.stack([stochastic(single) for single in singles])
    again = load_policy(path, deterministic=False, seed=1)
    np.testing.assert_allclose(again(batch), one_by_one, rtol=1e-6, atol=1e-6)  # row i is action i
    low, high = policy.action_minimum, policy.action_maximum
    assert np.all(one_by_one >= low) and np.all(one_by_one <= high)


def test_snapshots_record_the_observation_input(tmp_path):
    pixels_path = make_snapshot(tmp_path / "pixels.msgpack", *CASES["pixels"])
    states_path = make_snapshot(tmp_path / "states.msgpack", *CASES["states"])
    pixels = serialization.msgpack_restore(pixels_path.read_bytes())["observation_input"]
    states = serialization.msgpack_restore(states_path.read_bytes())["observation_input"]
    assert pixels == {"flattened": False, "shape": [16, 16, 3], "dtype": "uint8"}
    assert states["flattened"] is True and states["shape"] == [7]
    assert [entry["name"] for entry in states["entries"]] == ["position", "velocity"]  # sorted keys
