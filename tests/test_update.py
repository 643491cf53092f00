"""The jitted learner update (algorithm.md §6): routing, Adam/clipping per group, target timing, Polyak,
determinism, purity under vmap, and the critic target against a slow per-atom reference."""

from __future__ import annotations

import dataclasses
import functools
import sys
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dm_env import specs

import dmpo
from dmpo.agent.distributions import gaussian_sample
from dmpo.agent.learning import compute_losses, init_training_state, make_update_fn, step_keys, update_targets
from dmpo.agent.losses import clamp_duals
from dmpo.agent.networks import make_networks
from dmpo.config import LearnerConfig, NetworkConfig
from dmpo.types import EnvironmentSpec, Transition

B, N, D, OBS = 4, 3, 2, 3
NET_CONFIG = NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5, vmin=-2.0, vmax=2.0)
# Distinct learning rates and an active clip (the gradient norms are far above 0.05) make the per-group
# Adam check below sensitive to routing mistakes; one config keeps the number of compilations low.
CONFIG = LearnerConfig(num_samples=N, target_policy_update_period=2, target_critic_update_period=3,
                       max_gradient_norm=0.05, policy_learning_rate=1e-3, critic_learning_rate=2e-3,
                       dual_learning_rate=1e-2)
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32),
    actions=specs.BoundedArray((D,), np.float32, -1.0, 1.0),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)


class TinyTorso(nn.Module):
    """An observation network with parameters, so routing and sync of the obs net can be observed."""

    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(4)(x))


NETWORKS = make_networks(SPEC, NET_CONFIG)._replace(observation=TinyTorso())


def make_batch(seed: int = 0) -> Transition:
    rng = np.random.default_rng(seed)
    return Transition(
        observation=rng.normal(size=(B, OBS)).astype(np.float32),
        action=rng.uniform(-1.5, 1.5, size=(B, D)).astype(np.float32),  # some outside the bounds
        reward=rng.normal(size=B).astype(np.float32),
        discount=np.array([1.0, 0.5, 0.0, 1.0], np.float32),
        next_observation=rng.normal(size=(B, OBS)).astype(np.float32),
    )


@functools.cache
def update_fn(config: LearnerConfig = CONFIG):
    return make_update_fn(NETWORKS, config)


@functools.cache
def init(config: LearnerConfig = CONFIG, seed: int = 0):
    """States are immutable and no test donates them, so one initialisation per (config, seed) serves all."""
    return jax.jit(lambda key: init_training_state(NETWORKS, SPEC, config, key))(jax.random.PRNGKey(seed))


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def assert_trees_equal(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def trees_equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(b), strict=True))


def norm(tree) -> float:
    return float(np.sqrt(sum(np.sum(np.square(x)) for x in leaves(tree))))


def step_inputs(state, config=CONFIG):
    """What the update at `state` feeds its losses: synced targets, clamped duals, sampling key."""
    target = update_targets(state.target_params, state.params, state.steps, config)
    return target, clamp_duals(state.duals, -18.0), step_keys(state.key).sample


@jax.jit
def loss_gradients(state, batch):
    """Gradients of (critic loss, policy loss) w.r.t. (online params, duals, target params), computed
    with the same functions the update differentiates, at the inputs of the update at `state`."""
    target, duals, key = step_inputs(state)

    def loss(index, params, duals, target):
        return compute_losses(NETWORKS, CONFIG, params, target, duals, batch, key)[index]

    return (jax.grad(functools.partial(loss, 0), argnums=(0, 1, 2))(state.params, duals, target),
            jax.grad(functools.partial(loss, 1), argnums=(0, 1, 2))(state.params, duals, target))


def test_gradient_routing():
    critic_grads, policy_grads = loss_gradients(init(), make_batch())
    g_params, g_duals, g_target = critic_grads
    assert norm(g_params.observation) > 0 and norm(g_params.critic) > 0
    assert norm(g_params.policy) == 0 and norm(g_duals) == 0 and norm(g_target) == 0
    g_params, g_duals, g_target = policy_grads
    assert norm(g_params.policy) > 0 and norm(g_duals) > 0
    assert norm(g_params.observation) == 0 and norm(g_params.critic) == 0 and norm(g_target) == 0


def adam_first_step(params, grads, learning_rate, clip_norm=None):
    """Adam's first update is `−lr · g / (|g| + ε)` elementwise (m̂ = g, v̂ = g²)."""
    scale = 1.0 if clip_norm is None else min(1.0, clip_norm / norm(grads))
    def step(p, g):
        g = scale * np.asarray(g)
        return np.asarray(p) - learning_rate * g / (np.abs(g) + 1e-8)

    return jax.tree_util.tree_map(step, params, grads)


@pytest.mark.parametrize("clipping", [True, False])
def test_first_update_is_one_adam_step_per_group_with_per_group_clipping(clipping):
    config = dataclasses.replace(CONFIG, clipping=clipping)  # loss settings unchanged: same gradients
    state, batch = init(config), make_batch()
    _, duals, _ = step_inputs(state, config)
    (g_critic, _, _), (g_policy, g_duals, _) = loss_gradients(state, batch)
    new_state, metrics = update_fn(config)(state, batch)

    clip = 0.05 if clipping else None
    group = (state.params.observation, state.params.critic)
    critic_grads = (g_critic.observation, g_critic.critic)
    expected_obs, expected_critic = adam_first_step(group, critic_grads, 2e-3, clip)
    if clipping:  # the clip is active: the norms are far above 0.05
        assert norm(critic_grads) > 0.5 and norm(g_policy.policy) > 0.5
    expected_policy = adam_first_step(state.params.policy, g_policy.policy, 1e-3, clip)
    expected_duals = adam_first_step(duals, g_duals, 1e-2)  # duals are never clipped
    pairs = ((new_state.params.observation, expected_obs), (new_state.params.critic, expected_critic),
             (new_state.params.policy, expected_policy), (new_state.duals, expected_duals))
    for got, want in pairs:
        for x, y in zip(leaves(got), leaves(want), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(metrics["opt/critic_grad_norm"], norm(critic_grads), rtol=1e-5)
    np.testing.assert_allclose(metrics["opt/policy_grad_norm"], norm(g_policy.policy), rtol=1e-5)
    assert int(new_state.steps) == 1
    np.testing.assert_array_equal(new_state.key, step_keys(state.key).next)


def test_duals_are_clamped_at_minus_18_before_the_loss():
    state = init()
    low = state.duals._replace(log_temperature=jnp.full((1,), -30.0), log_alpha_mean=jnp.full((D,), -25.0))
    new_state, _ = update_fn()(state._replace(duals=low), make_batch())
    # One Adam step of size ≈ lr = 1e-2 from the floor, not from −30 / −25.
    np.testing.assert_allclose(new_state.duals.log_temperature, -18.0, atol=1.01e-2)
    np.testing.assert_allclose(new_state.duals.log_alpha_mean, -18.0, atol=1.01e-2)


def run_updates(config, num_steps, seed=0):
    state, states, all_metrics = init(config, seed), [], []
    update = update_fn(config)
    for step in range(num_steps):
        states.append(state)
        state, metrics = update(state, make_batch(step))
        all_metrics.append(metrics)
    return states + [state], all_metrics


def test_target_sync_timing_policy_and_critic_periods():
    states, _ = run_updates(CONFIG, 7)  # P_π = 2, P_Q = 3
    first = states[0]
    for name in ("observation", "policy", "critic"):  # independent initialisation
        assert not trees_equal(getattr(first.params, name), getattr(first.target_params, name))
    for k in range(7):
        before, after = states[k], states[k + 1]
        policy_source = before.params if k % 2 == 0 else before.target_params
        critic_source = before.params if k % 3 == 0 else before.target_params
        assert_trees_equal(after.target_params.policy, policy_source.policy)
        assert_trees_equal(after.target_params.critic, critic_source.critic)
        assert_trees_equal(after.target_params.observation, critic_source.observation)  # critic period
        if k > 0:  # online parameters move every step, so a copy is visible as a change
            assert trees_equal(after.target_params.policy, before.target_params.policy) == (k % 2 != 0)


def test_polyak_averaging_with_hard_copy_at_step_zero():
    config = dataclasses.replace(CONFIG, target_update_rate=0.25)
    states, _ = run_updates(config, 4)
    assert_trees_equal(states[1].target_params, states[0].params)
    for k in range(1, 4):
        expected = jax.tree_util.tree_map(lambda t, o: 0.75 * np.asarray(t) + 0.25 * np.asarray(o),
                                          states[k].target_params, states[k].params)
        for x, y in zip(leaves(states[k + 1].target_params), leaves(expected), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
        assert not trees_equal(states[k + 1].target_params.policy, states[k].params.policy)


def test_update_is_deterministic_for_a_fixed_key():
    a_states, a_metrics = run_updates(CONFIG, 3)
    b_states, b_metrics = run_updates(CONFIG, 3)
    assert_trees_equal(a_states[-1], b_states[-1])
    assert_trees_equal(a_metrics, b_metrics)
    c_states, _ = run_updates(CONFIG, 3, seed=1)
    assert not trees_equal(a_states[-1].params, c_states[-1].params)


def test_init_and_update_vmap_over_seeds():
    batch = make_batch()
    update = make_update_fn(NETWORKS, CONFIG, jit=False)

    def init_and_update(key):
        return update(init_training_state(NETWORKS, SPEC, CONFIG, key), batch)

    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    batched_state, batched_metrics = jax.jit(jax.vmap(init_and_update))(keys)
    for i in range(2):
        state, metrics = update_fn()(init(seed=i), batch)  # the same computation, one seed at a time
        for x, y in zip(leaves((state, metrics)), leaves((batched_state, batched_metrics)), strict=True):
            np.testing.assert_allclose(y[i], x, rtol=1e-5, atol=1e-6)
    assert not np.allclose(batched_metrics["critic_loss"][0], batched_metrics["critic_loss"][1])


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def project_slow(atoms, probs, support):
    """algorithm.md §6.3 one target atom and one source atom at a time."""
    atoms = np.clip(atoms, support[0], support[-1])
    out = np.zeros(len(support))
    for i, z_i in enumerate(support):
        for y_j, p_j in zip(atoms, probs, strict=True):
            if y_j >= z_i:
                gap = support[i + 1] - z_i if i + 1 < len(support) else 1.0
            else:
                gap = z_i - support[i - 1] if i > 0 else 1.0
            out[i] += p_j * min(max(1.0 - abs(y_j - z_i) / gap, 0.0), 1.0)
    return out


def test_critic_loss_and_q_values_match_a_slow_reference():
    state, batch = init(), make_batch()
    _, metrics = update_fn()(state, batch)
    params = state.params  # step 0 copies every target from the online networks
    support = np.asarray(NETWORKS.support, np.float64)
    mean, stddev = NETWORKS.apply_policy(params, batch.next_observation)
    actions = np.asarray(gaussian_sample(step_keys(state.key).sample, mean, stddev, N))  # [N, B, D]
    critic = jax.jit(lambda obs, act: NETWORKS.apply_critic(params, obs, act))
    loss, q = 0.0, np.zeros((N, B))
    for b in range(B):
        mixture = np.zeros(len(support))
        for n in range(N):
            logits = critic(batch.next_observation[b:b + 1], actions[n, b:b + 1])
            probs = softmax(np.asarray(logits, np.float64)[0])
            mixture += probs / N
            q[n, b] = probs @ support
        atoms = batch.reward[b] + CONFIG.discount * batch.discount[b] * support
        target = project_slow(atoms, mixture, support)
        logits = np.asarray(critic(batch.observation[b:b + 1], batch.action[b:b + 1]), np.float64)[0]
        log_probs = logits - logits.max() - np.log(np.sum(np.exp(logits - logits.max())))
        loss -= target @ log_probs / B
    np.testing.assert_allclose(metrics["critic_loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["q_min"], q.min(axis=0).mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["q_max"], q.max(axis=0).mean(), rtol=1e-5, atol=1e-6)


def test_augmentation_is_applied_inside_the_update(monkeypatch):
    calls = []

    def fake_augment(key, batch, mode):
        calls.append(mode)
        return shift(batch)

    def shift(batch):
        return batch._replace(observation=batch.observation + 1.0,
                              next_observation=batch.next_observation - 1.0)

    fake = types.ModuleType("dmpo.agent.augmentation")
    fake.augment_transition = fake_augment
    monkeypatch.setitem(sys.modules, "dmpo.agent.augmentation", fake)
    monkeypatch.setattr(dmpo, "augmentation", fake, raising=False)
    state, batch = init(), make_batch()
    augmented = make_update_fn(NETWORKS, dataclasses.replace(CONFIG, augmentation="image_shift"))
    got_state, got_metrics = augmented(state, batch)
    want_state, want_metrics = update_fn()(state, shift(batch))
    assert calls == ["image_shift"]
    for x, y in zip(leaves((got_state, got_metrics)), leaves((want_state, want_metrics)), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("reward", np.zeros((B, 1), np.float32), "batch.reward"),
    ("discount", np.zeros((B + 1,), np.float32), "batch.discount"),
    ("action", np.zeros((B, D + 1), np.float32), "batch.action"),
    ("next_observation", np.zeros((B + 1, OBS), np.float32), "batch.next_observation"),
])
def test_bad_batch_shapes_are_named(field, value, message):
    batch = make_batch()._replace(**{field: value})
    with pytest.raises(ValueError, match=message):
        update_fn()(init(), batch)
