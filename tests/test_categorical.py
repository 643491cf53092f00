"""Categorical projection, cross-entropy, mixtures and the critic TD loss."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from hypothesis import given, settings
from hypothesis import strategies as st

from dmpo.agent.losses.categorical import (
    categorical_cross_entropy,
    categorical_l2_project,
    categorical_td_loss,
    mixture_log_probs,
)

project_jit = jax.jit(categorical_l2_project)


def slow_project(z_p, probs, z_q):
    """Reference: move each source atom's mass, one at a time, onto its two bracketing atoms."""
    z_p, probs, z_q = (np.asarray(a, np.float64) for a in (z_p, probs, z_q))
    z_p = np.broadcast_to(z_p, probs.shape)
    out = np.zeros(probs.shape[:-1] + z_q.shape)
    for index in np.ndindex(*probs.shape[:-1]):
        for y, p in zip(z_p[index], probs[index], strict=True):
            y = min(max(y, z_q[0]), z_q[-1])
            upper = next(i for i in range(len(z_q)) if z_q[i] >= y)
            if z_q[upper] == y:
                out[index][upper] += p
                continue
            lower = upper - 1
            fraction = (y - z_q[lower]) / (z_q[upper] - z_q[lower])
            out[index][lower] += p * (1.0 - fraction)
            out[index][upper] += p * fraction
    return out


# Golden vectors of algorithm.md §6.3 (Acme's projection test).
GOLDEN = [
    ([0.0, 1.0, 2.0, 3.0], [0, 1, 0, 0], [0.25, 1.25, 2.25, 3.25], [0.25, 0.75, 0.0, 0.0]),
    ([0.0, 1.0, 2.0, 3.0], [0, 0, 1, 0], [0.25, 1.25, 2.25, 3.25], [0.0, 0.25, 0.75, 0.0]),
    ([0.0, 1.0, 2.0, 3.0], [0, 0.5, 0.5, 0], [0.25, 1.25, 2.25, 3.25], [0.125, 0.5, 0.375, 0.0]),
    ([0.0, 1.0, 2.0, 3.0], [0, 1, 0, 0], list(np.linspace(0.0, 2.5, 11)), [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("case", range(len(GOLDEN)))
def test_projection_golden_vectors(case, jit):
    z_p, probs, z_q, expected = (np.asarray(v, np.float32) for v in GOLDEN[case])
    fn = project_jit if jit else categorical_l2_project
    np.testing.assert_allclose(fn(z_p, probs, z_q), expected, atol=1e-6)


def test_projection_golden_vectors_batched_over_several_axes():
    # The first three golden cases share supports: stack them as a [3, 2, 4] batch (rows repeated).
    probs = np.stack([GOLDEN[i][1] for i in range(3)]).astype(np.float32)
    expected = np.stack([GOLDEN[i][3] for i in range(3)])
    probs = np.repeat(probs[:, None], 2, axis=1)
    got = categorical_l2_project(np.asarray(GOLDEN[0][0], np.float32), probs, np.asarray(GOLDEN[0][2]))
    assert got.shape == (3, 2, 4)
    np.testing.assert_allclose(got, np.repeat(expected[:, None], 2, axis=1), atol=1e-6)


def test_projection_clips_to_edges():
    z_q = np.linspace(-1.0, 1.0, 5).astype(np.float32)
    z_p = np.array([-10.0, -1.0, 1.0, 7.0], np.float32)
    probs = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    np.testing.assert_allclose(categorical_l2_project(z_p, probs, z_q), [0.3, 0, 0, 0, 0.7], atol=1e-6)


def test_projection_non_uniform_support():
    z_q = np.array([-1.0, 0.0, 0.5, 2.0, 5.0], np.float32)
    # 1.25 is half-way between 0.5 and 2.0; 3.0 is one third of the way from 2.0 to 5.0.
    z_p = np.array([1.25, 3.0], np.float32)
    probs = np.array([0.6, 0.4], np.float32)
    expected = [0.0, 0.0, 0.3, 0.3 + 0.4 * 2 / 3, 0.4 / 3]
    np.testing.assert_allclose(project_jit(z_p, probs, z_q), expected, atol=1e-6)


def _random_problem(seed, batch=(6,), num_p=7, num_q=9, uniform=False):
    rng = np.random.default_rng(seed)
    if uniform:
        z_q = np.linspace(-2.0, 3.0, num_q)
    else:
        z_q = np.cumsum(rng.uniform(0.05, 1.0, num_q)) - 2.0
    probs = rng.dirichlet(np.ones(num_p), size=batch)
    # Per-row source atoms r + γ d z reaching beyond both ends of the target support.
    base = np.linspace(-1.5, 1.5, num_p)
    reward = rng.normal(size=(*batch, 1)) * 2.0
    discount = rng.uniform(0.0, 1.5, size=(*batch, 1))
    z_p = reward + discount * base
    return z_p.astype(np.float32), probs.astype(np.float32), z_q.astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
def test_projection_matches_slow_reference(seed):
    z_p, probs, z_q = _random_problem(seed, batch=(3, 4))
    np.testing.assert_allclose(project_jit(z_p, probs, z_q), slow_project(z_p, probs, z_q), atol=1e-5)


@pytest.mark.parametrize("uniform", [True, False])
def test_projection_matches_rlax(uniform):
    z_p, probs, z_q = _random_problem(7, batch=(16,), num_p=11, num_q=11, uniform=uniform)
    expected = jax.vmap(rlax.categorical_l2_project, in_axes=(0, 0, None))(z_p, probs, z_q)
    np.testing.assert_allclose(categorical_l2_project(z_p, probs, z_q), expected, atol=1e-5)


@settings(deadline=None, max_examples=40)
@given(
    data=st.data(),
    num_p=st.integers(1, 6),
    num_q=st.integers(2, 6),
)
def test_projection_conserves_mass_property(data, num_p, num_q):
    finite = dict(allow_nan=False, allow_infinity=False, width=32)
    z_p = data.draw(hnp.arrays(np.float32, (3, num_p), elements=st.floats(-50, 50, **finite)))
    weights = data.draw(hnp.arrays(np.float32, (3, num_p), elements=st.floats(0.015625, 1.0, **finite)))
    gaps = data.draw(hnp.arrays(np.float32, (num_q,), elements=st.floats(0.125, 10.0, **finite)))
    probs = weights / weights.sum(-1, keepdims=True)
    z_q = np.cumsum(gaps) - 20.0
    got = np.asarray(categorical_l2_project(z_p, probs, z_q))
    assert np.all(got >= 0.0)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    # The projection also preserves the mean of the clipped source distribution (it is an L2 /
    # Cramér projection onto piecewise-linear hats).
    clipped_mean = (np.clip(z_p, z_q[0], z_q[-1]) * probs).sum(-1)
    np.testing.assert_allclose((got * z_q).sum(-1), clipped_mean, rtol=1e-4, atol=1e-3)


def test_projection_bad_inputs():
    z = np.linspace(0.0, 1.0, 4).astype(np.float32)
    probs = np.full((2, 4), 0.25, np.float32)
    with pytest.raises(ValueError, match="z_q"):
        categorical_l2_project(z, probs, z[::-1])
    with pytest.raises(ValueError, match="z_q"):
        categorical_l2_project(z, probs, np.zeros((2, 4)))
    with pytest.raises(ValueError, match="z_p"):
        categorical_l2_project(z[:3], probs, z)
    with pytest.raises(ValueError, match="z_p"):
        categorical_l2_project(np.zeros((3, 4)), probs, z)


@pytest.mark.parametrize("jit", [False, True])
def test_cross_entropy_matches_direct_formula(jit):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32) * 3
    target = rng.dirichlet(np.ones(5), size=(2, 3)).astype(np.float32)
    fn = jax.jit(categorical_cross_entropy) if jit else categorical_cross_entropy
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = -(target * np.log(softmax)).sum(-1)
    np.testing.assert_allclose(fn(target, logits), expected, rtol=1e-5)
    with pytest.raises(ValueError, match="target_probs"):
        categorical_cross_entropy(target[..., :4], logits)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -2])
def test_mixture_log_probs_is_log_of_mean_probability(axis, jit):
    logits = np.random.default_rng(1).normal(size=(4, 3, 6)).astype(np.float32) * 4
    fn = jax.jit(mixture_log_probs, static_argnums=1) if jit else mixture_log_probs
    got = np.asarray(fn(logits, axis))
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.log(softmax.mean(axis))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, atol=1e-6)
    # Averaging raw logits would be a different distribution (a normalised geometric mean).
    geometric = jax.nn.log_softmax(logits.mean(axis), -1)
    assert not np.allclose(got, geometric, atol=1e-3)


def test_mixture_log_probs_bad_axis():
    logits = np.zeros((4, 3, 6), np.float32)
    for axis in (2, -1, 3):
        with pytest.raises(ValueError, match="axis"):
            mixture_log_probs(logits, axis)
    with pytest.raises(ValueError, match="logits"):
        mixture_log_probs(np.zeros(6), 0)


def _td_problem(seed, batch=5, atoms=11):
    rng = np.random.default_rng(seed)
    support = np.linspace(-3.0, 3.0, atoms).astype(np.float32)
    logits = rng.normal(size=(batch, atoms)).astype(np.float32)
    reward = rng.normal(size=batch).astype(np.float32)
    discount = (0.99 * rng.integers(0, 2, size=batch)).astype(np.float32)
    target = rng.dirichlet(np.ones(atoms), size=batch).astype(np.float32)
    return logits, reward, discount, target, support


@pytest.mark.parametrize("jit", [False, True])
def test_td_loss_matches_reference(jit):
    logits, reward, discount, target, support = _td_problem(0)
    fn = jax.jit(categorical_td_loss) if jit else categorical_td_loss
    projected = slow_project(reward[:, None] + discount[:, None] * support, target, support)
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(projected * log_softmax).sum(-1).mean()
    np.testing.assert_allclose(fn(logits, reward, discount, target, support), expected, rtol=1e-5)


def test_td_loss_gradient_reaches_only_the_online_logits():
    logits, reward, discount, target, support = _td_problem(1)
    grads = jax.grad(categorical_td_loss, argnums=(0, 1, 2, 3))(logits, reward, discount, target, support)
    projected = slow_project(reward[:, None] + discount[:, None] * support, target, support)
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    # d/dlogits of mean_B CE = (softmax − target) / B; the target is a stop-gradient.
    np.testing.assert_allclose(grads[0], (softmax - projected) / len(logits), atol=1e-6)
    for grad in grads[1:]:
        np.testing.assert_array_equal(grad, 0.0)


def test_td_loss_bad_shapes():
    logits, reward, discount, target, support = _td_problem(2)
    with pytest.raises(ValueError, match="reward_t"):
        categorical_td_loss(logits, reward[:, None], discount, target, support)
    with pytest.raises(ValueError, match="discount_t"):
        categorical_td_loss(logits, reward, discount[:3], target, support)
    with pytest.raises(ValueError, match="target_probs_t"):
        categorical_td_loss(logits, reward, discount, target[:, :5], support)
    with pytest.raises(ValueError, match="support"):
        categorical_td_loss(logits, reward, discount, target, support[:5])
    with pytest.raises(ValueError, match="logits_tm1"):
        categorical_td_loss(logits[0], reward, discount, target, support)


def test_td_loss_vanishes_when_prediction_equals_target():
    # A terminal transition with reward on an atom: the projected target is one-hot there, so
    # logits that put (almost) all mass there give a loss near zero.
    support = jnp.linspace(-2.0, 2.0, 5)
    logits = jnp.array([[-30.0, -30.0, -30.0, 30.0, -30.0]])
    loss = categorical_td_loss(logits, jnp.array([1.0]), jnp.array([0.0]), jnp.full((1, 5), 0.2), support)
    assert float(loss) < 1e-6
