"""Networks: shapes, layer structure against hand computations, initialisers, heads, critic clipping."""

from __future__ import annotations

import dataclasses
import sys
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dm_env import specs

from dmpo.agent import networks as networks_lib
from dmpo.agent.networks import (
    MLP,
    BatchFlatten,
    CategoricalValueHead,
    GaussianPolicyHead,
    LayerNormMLP,
    batch_concat,
    init_params,
    make_networks,
    make_support,
    pixel_network_config,
)
from dmpo.config import NetworkConfig
from dmpo.types import EnvironmentSpec

TINY = NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5, vmin=-2.0, vmax=2.0)


def make_spec(obs_shape=(3,), low=-1.0, high=1.0, action_dim=2, observations=None) -> EnvironmentSpec:
    return EnvironmentSpec(
        observations=observations if observations is not None else specs.Array(obs_shape, np.float32),
        actions=specs.BoundedArray((action_dim,), np.float32, low, high),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )


def layer_norm(x, scale, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def dense(p, x):
    return x @ np.asarray(p["kernel"]) + np.asarray(p["bias"])


def test_batch_concat_sorts_dict_keys_and_flattens():
    obs = {"b": jnp.ones((2, 3)), "a": jnp.arange(8.0).reshape(2, 2, 2)}
    out = batch_concat(obs)
    expected = np.concatenate([np.arange(8.0).reshape(2, 4), np.ones((2, 3))], axis=1)
    np.testing.assert_array_equal(out, expected)


def test_batch_concat_rejects_mismatched_batch():
    with pytest.raises(ValueError, match="batch axis"):
        batch_concat({"a": jnp.ones((2, 3)), "b": jnp.ones((3, 3))})


def test_batch_flatten_has_no_parameters():
    variables = BatchFlatten().init(jax.random.PRNGKey(0), {"x": jnp.ones((1, 2))})
    assert jax.tree_util.tree_leaves(variables) == []


def test_layer_norm_mlp_single_size_is_bounded_tanh_of_layer_norm():
    x = 100.0 * jax.random.normal(jax.random.PRNGKey(1), (6, 5))
    module = LayerNormMLP((4,))
    variables = module.init(jax.random.PRNGKey(0), x)
    out = np.asarray(module.apply(variables, x))
    p = variables["params"]
    expected = np.tanh(layer_norm(dense(p["Dense_0"], np.asarray(x)), np.asarray(p["LayerNorm_0"]["scale"]),
                                  np.asarray(p["LayerNorm_0"]["bias"])))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(out) <= 1.0)


@pytest.mark.parametrize("activate_final", [False, True])
def test_layer_norm_mlp_matches_hand_forward(activate_final):
    x = jax.random.normal(jax.random.PRNGKey(2), (3, 4))
    module = LayerNormMLP((6, 5, 3), activate_final=activate_final)
    variables = module.init(jax.random.PRNGKey(0), x)
    p = variables["params"]
    h = np.tanh(layer_norm(dense(p["Dense_0"], np.asarray(x)), np.asarray(p["LayerNorm_0"]["scale"]),
                           np.asarray(p["LayerNorm_0"]["bias"])))
    h = elu(dense(p["MLP_0"]["Dense_0"], h))
    h = dense(p["MLP_0"]["Dense_1"], h)
    if activate_final:
        h = elu(h)
    np.testing.assert_allclose(module.apply(variables, x), h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activate_final", [False, True])
def test_layer_norm_mlp_normalizing_every_layer_matches_hand_forward(activate_final):
    x = jax.random.normal(jax.random.PRNGKey(5), (3, 4))
    module = LayerNormMLP((6, 5, 3), activate_final=activate_final, normalize_every=True)
    variables = module.init(jax.random.PRNGKey(0), x)
    p = variables["params"]

    def norm(params, h):
        return layer_norm(h, np.asarray(params["scale"]), np.asarray(params["bias"]))

    h = np.tanh(norm(p["LayerNorm_0"], dense(p["Dense_0"], np.asarray(x))))
    h = elu(norm(p["MLP_0"]["LayerNorm_0"], dense(p["MLP_0"]["Dense_0"], h)))
    h = dense(p["MLP_0"]["Dense_1"], h)
    if activate_final:
        h = elu(norm(p["MLP_0"]["LayerNorm_1"], h))
    else:
        assert "LayerNorm_1" not in p["MLP_0"]  # no normalisation where there is no activation
    np.testing.assert_allclose(module.apply(variables, x), h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activate_final", [False, True])
def test_residual_blocks_match_hand_forward(activate_final):
    x = jax.random.normal(jax.random.PRNGKey(6), (3, 4))
    module = LayerNormMLP((6, 6, 6, 6, 6), activate_final=activate_final, residual=True)
    variables = module.init(jax.random.PRNGKey(0), x)
    p = variables["params"]

    def norm(params, h):
        return layer_norm(h, np.asarray(params["scale"]), np.asarray(params["bias"]))

    h = np.tanh(norm(p["LayerNorm_0"], dense(p["Dense_0"], np.asarray(x))))
    blocks = p["ResidualBlocks_0"]
    for block in range(2):  # two blocks of two layers after the first
        inner = elu(norm(blocks[f"LayerNorm_{2 * block}"], dense(blocks[f"Dense_{2 * block}"], h)))
        h = h + norm(blocks[f"LayerNorm_{2 * block + 1}"], dense(blocks[f"Dense_{2 * block + 1}"], inner))
    if activate_final:
        h = elu(h)
    assert sorted(blocks) == ["Dense_0", "Dense_1", "Dense_2", "Dense_3",
                              "LayerNorm_0", "LayerNorm_1", "LayerNorm_2", "LayerNorm_3"]
    np.testing.assert_allclose(module.apply(variables, x), h, rtol=1e-5, atol=1e-5)


def test_residual_blocks_keep_the_dense_weights_of_the_plain_torso():
    """The same sizes: the same dense layers (so the same FLOPs), plus two LayerNorms per block."""
    spec = make_spec()
    sizes = (8, 8, 8)
    config = dataclasses.replace(TINY, policy_layer_sizes=sizes, critic_layer_sizes=sizes)
    plain = init_params(make_networks(spec, config), spec, jax.random.PRNGKey(0))
    residual = init_params(make_networks(spec, dataclasses.replace(config, residual=True)), spec,
                           jax.random.PRNGKey(0))

    def kernels(tree):
        return sorted(np.shape(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
                      if "kernel" in jax.tree_util.keystr(path))

    for network in ("policy", "critic"):  # the residual blocks reach both
        before, after = getattr(plain, network), getattr(residual, network)
        assert kernels(after) == kernels(before)
        assert "ResidualBlocks_0" in after["params"]["torso"] and "MLP_0" not in after["params"]["torso"]


def test_mlp_weight_init_is_uniform_variance_scaling_fan_out():
    fan_in, fan_out = 256, 512
    variables = MLP((fan_out,)).init(jax.random.PRNGKey(3), jnp.ones((1, fan_in)))
    kernel = np.asarray(variables["params"]["Dense_0"]["kernel"])
    limit = np.sqrt(0.999 / fan_out)
    assert np.abs(kernel).max() <= limit
    assert np.abs(kernel).max() > 0.99 * limit  # uniform: the edges are reached
    np.testing.assert_allclose(kernel.var(), limit**2 / 3, rtol=0.02)
    np.testing.assert_array_equal(variables["params"]["Dense_0"]["bias"], 0.0)


def test_value_head_init_is_truncated_normal_with_fan_in_std():
    fan_in = 400
    head = CategoricalValueHead(-1.0, 1.0, 501)
    variables = head.init(jax.random.PRNGKey(4), jnp.ones((1, fan_in)))
    kernel = np.asarray(variables["params"]["Dense_0"]["kernel"])
    std = 1.0 / np.sqrt(fan_in)
    assert np.abs(kernel).max() <= 2 * std + 1e-7
    # A normal truncated at ±2σ has standard deviation 0.8796σ.
    np.testing.assert_allclose(kernel.std(), 0.8796 * std, rtol=0.02)


def test_support_endpoints_and_even_spacing():
    support = np.asarray(make_support(NetworkConfig()))
    assert support.shape == (51,)
    assert support[0] == -150.0 and support[-1] == 150.0
    np.testing.assert_allclose(np.diff(support), 6.0, atol=2e-5)  # float32 spacing at 150
    head = CategoricalValueHead(0.0, 1.0, 10)
    np.testing.assert_allclose(np.diff(head.support), 1.0 / 9.0, rtol=1e-6)


@pytest.mark.parametrize("init_scale", [0.3, 0.7, 1.0])
def test_policy_stddev_starts_at_init_scale_and_mean_near_zero(init_scale):
    h = jax.random.normal(jax.random.PRNGKey(5), (16, 32))
    head = GaussianPolicyHead(3, init_scale=init_scale)
    mean, stddev = head.apply(head.init(jax.random.PRNGKey(0), h), h)
    assert mean.shape == stddev.shape == (16, 3)
    # Pre-activations have std sqrt(1e-4 · 32) ≈ 0.01·|h|, so σ/init_scale = 1 ± ~0.01 per unit of h.
    np.testing.assert_allclose(stddev, init_scale, rtol=0.05)
    np.testing.assert_allclose(np.mean(stddev), init_scale, rtol=0.01)
    assert np.abs(mean).max() < 0.05


def test_policy_fixed_scale_is_constant_and_has_no_scale_layer():
    head = GaussianPolicyHead(2, init_scale=0.4, fixed_scale=True)
    h = 50.0 * jax.random.normal(jax.random.PRNGKey(6), (5, 7))
    variables = head.init(jax.random.PRNGKey(0), h)
    assert set(variables["params"]) == {"mean"}
    _, stddev = head.apply(variables, h)
    np.testing.assert_array_equal(stddev, np.full((5, 2), 0.4, np.float32))


def test_policy_tanh_mean_bounded_and_min_scale_floor():
    head = GaussianPolicyHead(2, init_scale=0.5, min_scale=1e-3, tanh_mean=True)
    h = jnp.ones((3, 4))
    variables = head.init(jax.random.PRNGKey(0), h)
    big = jax.tree_util.tree_map(lambda x: x, variables)
    big["params"]["mean"]["kernel"] = jnp.full((4, 2), 100.0)
    big["params"]["stddev"]["kernel"] = jnp.full((4, 2), -100.0)
    mean, stddev = head.apply(big, h)
    np.testing.assert_allclose(mean, 1.0)  # tanh(400) saturates at the bound
    np.testing.assert_allclose(stddev, 1e-3, rtol=1e-6)  # softplus(−400) ≈ 0 leaves the floor


def test_control_network_shapes_and_dict_observations():
    observations = {"pos": specs.Array((3,), np.float32), "vel": specs.Array((2, 2), np.float32)}
    spec = make_spec(observations=observations)
    nets = make_networks(spec, TINY)
    params = init_params(nets, spec, jax.random.PRNGKey(0))
    obs = {"pos": jnp.ones((4, 3)), "vel": jnp.ones((4, 2, 2))}
    mean, stddev = nets.apply_policy(params, obs)
    assert mean.shape == stddev.shape == (4, 2)
    assert nets.apply_critic(params, obs, jnp.zeros((4, 2))).shape == (4, 5)
    assert nets.support.shape == (5,)
    assert params.observation == {}


@pytest.mark.parametrize("layer_norm, normalized_layers", [("first", 0), ("every", 2)])
def test_layer_norm_setting_reaches_policy_and_critic(layer_norm, normalized_layers):
    spec = make_spec()
    config = dataclasses.replace(TINY, policy_layer_sizes=(8, 8, 8), critic_layer_sizes=(8, 8, 8),
                                 layer_norm=layer_norm)
    params = init_params(make_networks(spec, config), spec, jax.random.PRNGKey(0))
    for network in (params.policy, params.critic):
        torso = network["params"]["torso"]
        assert "LayerNorm_0" in torso  # the reference's, after the first layer, either way
        later = [name for name in torso["MLP_0"] if name.startswith("LayerNorm")]
        assert len(later) == normalized_layers


def test_critic_clips_actions_to_spec_bounds():
    spec = make_spec(low=np.array([-1.0, 0.5]), high=np.array([2.0, 3.0]))
    nets = make_networks(spec, TINY)
    params = init_params(nets, spec, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 3))
    at_bounds = jnp.array([[-1.0, 0.5], [2.0, 3.0], [-1.0, 3.0]])
    beyond = jnp.array([[-5.0, -7.0], [9.0, 3.5], [-1.5, 30.0]])
    critic = jax.jit(lambda action: nets.apply_critic(params, obs, action))
    np.testing.assert_array_equal(critic(beyond), critic(at_bounds))
    inside = jnp.array([[0.0, 1.0], [1.0, 2.0], [0.5, 1.5]])
    assert not np.allclose(critic(inside), critic(at_bounds))


def test_critic_rejects_wrong_action_shape():
    spec = make_spec()
    nets = make_networks(spec, TINY)
    params = init_params(nets, spec, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="action must have shape"):
        nets.apply_critic(params, jnp.ones((4, 3)), jnp.ones((4, 3)))


def test_init_params_depends_on_key_and_jits():
    spec = make_spec()
    nets = make_networks(spec, TINY)
    a = jax.jit(lambda k: init_params(nets, spec, k))(jax.random.PRNGKey(0))
    b = init_params(nets, spec, jax.random.PRNGKey(0))
    c = init_params(nets, spec, jax.random.PRNGKey(1))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    kernel = ("params", "torso", "Dense_0", "kernel")
    first = a.policy[kernel[0]][kernel[1]][kernel[2]][kernel[3]]
    assert not np.allclose(first, c.policy["params"]["torso"]["Dense_0"]["kernel"])


def test_unbounded_action_spec_is_rejected():
    spec = make_spec()._replace(actions=specs.Array((2,), np.float32))
    with pytest.raises(ValueError, match="BoundedArray"):
        make_networks(spec, TINY)


class FakeTorso(nn.Module):
    """Stands in for a pixel torso: uint8 image → a small embedding."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(6)(batch_concat(x).astype(jnp.float32) / 255.0)


@pytest.fixture()
def fake_torsos(monkeypatch):
    fake = types.ModuleType("dmpo.agent.networks.torsos")
    fake.ImpalaTorso = FakeTorso
    fake.DrQTorso = FakeTorso
    monkeypatch.setitem(sys.modules, "dmpo.agent.networks.torsos", fake)
    monkeypatch.setattr(networks_lib, "torsos", fake, raising=False)
    return fake


def test_pixel_network_configs():
    drq = pixel_network_config("drq")
    assert drq.policy_layer_sizes == (50, 1024, 1024) and drq.critic_layer_sizes == (1024, 1024)
    assert drq.init_scale == 1.0 and drq.observation_network == "drq"
    assert pixel_network_config("impala").init_scale == 1.0
    with pytest.raises(ValueError, match="kind"):
        pixel_network_config("resnet")


def test_drq_networks_structure(fake_torsos):
    spec = make_spec(observations=specs.Array((8, 8, 3), np.uint8))
    config = pixel_network_config("drq", policy_layer_sizes=(4, 16), critic_layer_sizes=(16,), num_atoms=5)
    nets = make_networks(spec, config)
    params = jax.jit(lambda key: init_params(nets, spec, key))(jax.random.PRNGKey(0))
    critic = params.critic["params"]
    assert critic["projection"]["Dense_0"]["kernel"].shape == (6, 50)
    assert "LayerNorm_0" in critic["projection"]
    assert critic["torso"]["Dense_0"]["kernel"].shape == (52, 16)  # 50 features + 2 actions
    assert "LayerNorm_0" not in critic["torso"]  # a plain ReLU MLP, unlike the state critic
    kernel = np.asarray(critic["torso"]["Dense_0"]["kernel"])  # orthogonal: orthonormal columns
    np.testing.assert_allclose(kernel.T @ kernel, np.eye(16), atol=1e-5)
    obs = jnp.zeros((2, 8, 8, 3), jnp.uint8)
    logits, (mean, _) = jax.jit(lambda o, a: (nets.apply_critic(params, o, a), nets.apply_policy(params, o)))(
        obs, jnp.zeros((2, 2)))
    assert logits.shape == (2, 5) and mean.shape == (2, 2)


def test_impala_networks_use_impala_torso(fake_torsos):
    spec = make_spec(observations=specs.Array((8, 8, 3), np.uint8))
    config = pixel_network_config("impala", policy_layer_sizes=(4,), critic_layer_sizes=(4,))
    nets = make_networks(spec, config)
    assert isinstance(nets.observation, FakeTorso)
    assert "LayerNorm_0" in init_params(nets, spec, jax.random.PRNGKey(0)).critic["params"]["torso"]


@pytest.mark.parametrize("kind", ["flatten", "drq"])
def test_sampled_logits_equal_one_critic_call_per_sample(fake_torsos, kind):
    if kind == "drq":
        spec = make_spec(observations=specs.Array((8, 8, 3), np.uint8))
        config = pixel_network_config("drq", policy_layer_sizes=(4,), critic_layer_sizes=(16,), num_atoms=5)
        obs = jax.random.randint(jax.random.PRNGKey(1), (3, 8, 8, 3), 0, 255).astype(jnp.uint8)
    else:
        spec, config = make_spec(), TINY
        obs = jax.random.normal(jax.random.PRNGKey(1), (3, 3))
    nets = make_networks(spec, config)
    params = init_params(nets, spec, jax.random.PRNGKey(0))
    actions = 1.5 * jax.random.normal(jax.random.PRNGKey(2), (4, 3, 2))  # [N, B, D], some out of bounds

    @jax.jit
    def both(obs, actions):
        embedding = nets.observation.apply(params.observation, obs)
        sampled = nets.critic.apply(params.critic, embedding, actions, method="sampled_logits")
        one_by_one = jnp.stack([nets.critic.apply(params.critic, embedding, a) for a in actions])
        return sampled, one_by_one

    sampled, one_by_one = both(obs, actions)
    assert sampled.shape == (4, 3, 5)
    np.testing.assert_allclose(sampled, one_by_one, rtol=1e-5, atol=1e-6)
