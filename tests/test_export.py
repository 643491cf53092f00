"""`dmpo export`: the ONNX and StableHLO files act like `dmpo.load_policy` on 100 observations."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import jax
import numpy as np
import pytest
from dm_env import specs

import dmpo
from dmpo.agent.networks import PolicyParams, init_params, make_networks, pixel_network_config
from dmpo.agent.networks.normalization import STATISTICS
from dmpo.agent.policies.export import ExportError, export_policy
from dmpo.agent.policies.snapshot import save_policy
from dmpo.cli.main import main
from dmpo.config import NetworkConfig
from dmpo.envs.observations import flatten_observation
from dmpo.types import EnvironmentSpec

onnxruntime = pytest.importorskip("onnxruntime")

STATES = NetworkConfig(policy_layer_sizes=(8, 8), critic_layer_sizes=(8,), num_atoms=5, init_scale=0.4)
PIXELS = pixel_network_config("impala", policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5)
ACTIONS = specs.BoundedArray((2,), np.float32, -1.0, 1.0, name="action")
SCALAR = specs.Array((), np.float32)


def make_snapshot(path, observations, config, seed=0):
    """A snapshot of perturbed random parameters (no training needed to compare two runtimes)."""
    env_spec = EnvironmentSpec(observations=observations, actions=ACTIONS, rewards=SCALAR,
                               discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))
    params = init_params(make_networks(env_spec, config), env_spec, jax.random.PRNGKey(seed))
    leaves, tree = jax.tree_util.tree_flatten(PolicyParams(params.observation, params.policy))
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    leaves = [leaf + 0.3 * jax.random.normal(k, leaf.shape) for leaf, k in zip(leaves, keys, strict=True)]
    return save_policy(path, env_spec, config, jax.tree_util.tree_unflatten(tree, leaves), {"env": "fake"})


CASES = {
    # A dict observation: the exported input is the sorted-key concatenation the agent uses.
    "states": ({"velocity": specs.Array((3,), np.float32), "position": specs.Array((2, 2), np.float32)},
               STATES),
    "pixels": (specs.Array((16, 16, 3), np.uint8), PIXELS),
}


def observations(case, rng, count=100):
    spec, _ = CASES[case]
    if case == "pixels":
        return [rng.integers(0, 256, size=spec.shape, dtype=np.uint8) for _ in range(count)]
    return [{k: rng.normal(size=s.shape).astype(np.float32) * 2 for k, s in spec.items()}
            for _ in range(count)]


@pytest.mark.parametrize("case", list(CASES))
def test_exported_policies_act_like_load_policy(case, tmp_path):
    spec, config = CASES[case]
    snapshot = make_snapshot(tmp_path / "run" / "snapshots" / "policy.msgpack", spec, config)
    policy = dmpo.load_policy(snapshot)
    obs = observations(case, np.random.default_rng(1))
    expected = np.stack([policy(o) for o in obs])
    assert np.std(expected) > 0.05  # the actions differ between observations: a constant would not pass
    batch = np.stack(obs) if case == "pixels" else np.stack([flatten_observation(o) for o in obs])

    onnx_file = tmp_path / "policy.onnx"
    main(["export", str(tmp_path / "run"), "--format", "onnx", "-o", str(onnx_file)])
    session = onnxruntime.InferenceSession(str(onnx_file))
    (actions,) = session.run(["action"], {"observation": batch})
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-5)
    (single,) = session.run(["action"], {"observation": batch[:1]})  # the batch axis is symbolic
    np.testing.assert_allclose(single, expected[:1], rtol=0, atol=1e-5)

    hlo_file = export_policy(snapshot, tmp_path / "policy.stablehlo", "stablehlo")
    exported = jax.export.deserialize(bytearray(hlo_file.read_bytes()))
    np.testing.assert_allclose(np.asarray(exported.call(batch)), expected, rtol=0, atol=1e-5)


def test_export_errors_are_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ExportError, match="no policy snapshot at"):
        export_policy(run, tmp_path / "p.onnx", "stablehlo")
    make_snapshot(run / "snapshots" / "policy.msgpack", CASES["states"][0], STATES)
    with pytest.raises(ExportError, match="best.msgpack"):
        export_policy(run, tmp_path / "p.onnx", "onnx", best=True)
    with pytest.raises(ExportError, match="does not exist"):
        export_policy(run, tmp_path / "missing" / "p.onnx", "onnx")
    with pytest.raises(ExportError, match="is a folder"):
        export_policy(run, tmp_path, "onnx")
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path / "nowhere"), "--format", "stablehlo", "-o", str(tmp_path / "p")])
    assert "dmpo: error: no run folder or snapshot file at" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ExportError, match="is not writable"):
            export_policy(run, locked / "p.onnx", "stablehlo")
    monkeypatch.setitem(sys.modules, "jax2onnx", None)  # as if the extra were not installed
    hint = r"pip install 'dmpo-jax\[export\]' \(from a checkout: pip install -e '\.\[export\]'\)"
    with pytest.raises(ExportError, match=hint + "; jax2onnx is missing"):
        export_policy(run, tmp_path / "p.onnx", "onnx")


def test_export_of_a_trained_run_reproduces_its_policy(tmp_path):
    """A real (tiny) training run's snapshot, as the trainer writes it, exported and run in onnxruntime.

    It normalises its observations by running statistics, which are part of the observation network's
    parameters: the export must standardise them as the learner's last statistics say."""
    from dmpo.config import DMPOConfig, LearnerConfig, TrainConfig
    from dmpo.envs import FakeEnvironment
    from dmpo.run.run import train

    shape = {"velocity": (3,), "position": (2,)}
    env_factory = lambda seed: FakeEnvironment(observation_shape=shape, action_dim=2,  # noqa: E731
                                               episode_length=10, seed=seed % 1000)
    agent = DMPOConfig(batch_size=8, samples_per_insert=2.0, min_replay_size=10, max_replay_size=500,
                       # Snapshots hold the target observation network: copied every 5 updates here, so
                       # that the 8 updates of this run reach it.
                       learner=LearnerConfig(num_samples=2, target_critic_update_period=5),
                       networks=dataclasses.replace(STATES, normalize_observations=True))
    config = TrainConfig(env="test:fake", steps=40, seed=0, eval_every=40, eval_episodes=1, agent=agent)
    train(config, tmp_path / "run", env_factory=env_factory, progress=False, quiet=True)
    policy = dmpo.load_policy(tmp_path / "run")
    assert float(policy.params.observation[STATISTICS]["count"]) > 0  # the learner merged batches
    env, obs = env_factory(5), []
    timestep = env.reset()
    for _ in range(100):
        obs.append(timestep.observation)
        timestep = env.step(np.clip(policy(timestep.observation), -1, 1))
    onnx_file = export_policy(tmp_path / "run", tmp_path / "trained.onnx", "onnx")
    session = onnxruntime.InferenceSession(str(onnx_file))
    (actions,) = session.run(["action"], {"observation": np.stack([flatten_observation(o) for o in obs])})
    np.testing.assert_allclose(actions, np.stack([policy(o) for o in obs]), rtol=0, atol=1e-5)
    metadata = session.get_modelmeta().custom_metadata_map
    # The trainer records a Python factory by its qualified name (`dmpo.envs.entry_points`).
    assert metadata["env"] == dmpo.load_policy(tmp_path / "run").metadata["env"]
    assert metadata["env"].startswith("python:") and json.loads(metadata["action_minimum"]) == [-1.0, -1.0]


def test_a_non_finite_observation_is_an_error_in_python_and_a_finite_flagged_action_in_onnx(tmp_path):
    """A robot runtime must never receive a NaN action: `load_policy` and `predict` raise, naming the
    entries; the ONNX graph replaces them by 0 (its action is the policy's at that observation) and
    says which rows it changed in `observation_finite`; StableHLO acts the same way, without the flag."""
    spec, config = CASES["states"]
    snapshot = make_snapshot(tmp_path / "run" / "snapshots" / "policy.msgpack", spec, config)
    policy = dmpo.load_policy(snapshot)
    good = observations("states", np.random.default_rng(2), count=3)
    bad = [dict(o) for o in good]
    bad[1]["velocity"] = np.array([0.5, np.nan, 1.0], np.float32)
    bad[2]["position"] = np.array([[np.inf, 0.0], [0.0, -np.inf]], np.float32)
    with pytest.raises(ValueError, match=r"observation\['velocity'\]\[1\] = nan; the policy"):
        policy(bad[1])
    named = (r"2 non-finite entries \(NaN or inf\): observation\['position'\]\[0, 0\] = inf \(batch row 2\), "
             r"observation\['position'\]\[1, 1\] = -inf \(batch row 2\)")
    with pytest.raises(ValueError, match=named):
        policy.predict({k: np.stack([o[k] for o in good[:2] + bad[2:]]) for k in spec})

    batch = np.stack([flatten_observation(o) for o in bad])
    # The graph's stand-in: each non-finite entry replaced by 0, through load_policy.
    zeroed = [{k: np.where(np.isfinite(v), v, 0).astype(np.float32) for k, v in o.items()} for o in bad]
    expected = np.stack([policy(o) for o in zeroed])
    onnx_file = tmp_path / "policy.onnx"
    main(["export", str(tmp_path / "run"), "--format", "onnx", "-o", str(onnx_file)])
    session = onnxruntime.InferenceSession(str(onnx_file))
    actions, finite = session.run(["action", "observation_finite"], {"observation": batch})
    assert np.isfinite(actions).all() and finite.tolist() == [True, False, False]
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-5)
    low, high = policy.action_minimum, policy.action_maximum
    assert (actions >= low).all() and (actions <= high).all()
    assert "never NaN" in session.get_modelmeta().custom_metadata_map["dmpo_format"]
    hlo_file = export_policy(snapshot, tmp_path / "policy.stablehlo", "stablehlo")
    exported = jax.export.deserialize(bytearray(hlo_file.read_bytes()))
    np.testing.assert_allclose(np.asarray(exported.call(batch)), expected, rtol=0, atol=1e-5)
