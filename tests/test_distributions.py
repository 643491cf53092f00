"""Diagonal Gaussian helpers against closed forms, scipy and Monte-Carlo estimates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dmpo.distributions import gaussian_entropy, gaussian_kl, gaussian_log_prob, gaussian_sample


def _params(seed, shape):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=shape).astype(np.float32)
    stddev = rng.uniform(0.2, 2.0, size=shape).astype(np.float32)
    return mean, stddev


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("shape", [(3,), (4, 3)])
def test_log_prob_matches_scipy(jit, shape):
    mean, stddev = _params(0, shape)
    x = np.random.default_rng(1).normal(size=(5, *shape)).astype(np.float32)
    fn = jax.jit(gaussian_log_prob) if jit else gaussian_log_prob
    got = fn(mean, stddev, x)
    expected = stats.norm.logpdf(x, loc=mean, scale=stddev).sum(-1)
    assert got.shape == (5, *shape[:-1])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # Without sample axes the result drops only the event axis.
    np.testing.assert_allclose(fn(mean, stddev, x[0]), expected[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_kl_matches_closed_form_per_dimension(jit):
    mean_p, stddev_p = _params(2, (4, 3))
    mean_q, stddev_q = _params(3, (4, 3))
    fn = jax.jit(gaussian_kl) if jit else gaussian_kl
    got = np.asarray(fn(mean_p, stddev_p, mean_q, stddev_q))
    # KL(p||q) = log(σq/σp) + (σp² + (μp−μq)²) / (2σq²) − ½, written out in float64.
    mp, sp, mq, sq = (np.float64(a) for a in (mean_p, stddev_p, mean_q, stddev_q))
    expected = np.log(sq / sp) + (sp**2 + (mp - mq) ** 2) / (2 * sq**2) - 0.5
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert np.all(got >= -1e-6)
    np.testing.assert_allclose(fn(mean_p, stddev_p, mean_p, stddev_p), 0.0, atol=1e-6)


def test_kl_matches_monte_carlo():
    mean_p, stddev_p = np.array([0.3, -1.0], np.float32), np.array([0.5, 1.5], np.float32)
    mean_q, stddev_q = np.array([0.0, 0.2], np.float32), np.array([0.8, 1.0], np.float32)
    x = np.asarray(gaussian_sample(jax.random.PRNGKey(0), mean_p, stddev_p, 200_000))
    log_ratio = stats.norm.logpdf(x, mean_p, stddev_p) - stats.norm.logpdf(x, mean_q, stddev_q)
    np.testing.assert_allclose(gaussian_kl(mean_p, stddev_p, mean_q, stddev_q), log_ratio.mean(0),
                               rtol=0.03, atol=3e-3)


def test_sample_shape_and_moments():
    mean, stddev = _params(4, (2, 3))
    samples = jax.jit(gaussian_sample, static_argnums=3)(jax.random.PRNGKey(1), mean, stddev, 50_000)
    assert samples.shape == (50_000, 2, 3) and samples.dtype == jnp.float32
    np.testing.assert_allclose(samples.mean(0), mean, atol=0.04)
    np.testing.assert_allclose(samples.std(0), stddev, rtol=0.03)
    same = gaussian_sample(jax.random.PRNGKey(1), mean, stddev, 50_000)
    np.testing.assert_allclose(samples, same, atol=1e-5)  # same key, same draws (jit may fuse ops)


def test_sample_is_reparametrised():
    # d sample / d mean = 1 and d sample / d stddev = the standard-normal noise.
    key = jax.random.PRNGKey(2)
    mean, stddev = jnp.zeros(3), jnp.ones(3)
    noise = gaussian_sample(key, mean, stddev, 1)[0]
    grad_mean = jax.grad(lambda m: gaussian_sample(key, m, stddev, 1).sum())(mean)
    grad_std = jax.grad(lambda s: gaussian_sample(key, mean, s, 1).sum())(stddev)
    np.testing.assert_allclose(grad_mean, 1.0)
    np.testing.assert_allclose(grad_std, noise, rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_entropy_matches_scipy(jit):
    _, stddev = _params(5, (4, 3))
    fn = jax.jit(gaussian_entropy) if jit else gaussian_entropy
    expected = stats.norm.entropy(scale=stddev).sum(-1)
    np.testing.assert_allclose(fn(stddev), expected, rtol=1e-5)


def test_bad_shapes_raise_naming_argument():
    mean, stddev = _params(6, (4, 3))
    with pytest.raises(ValueError, match="stddev"):
        gaussian_log_prob(mean, stddev[:, :2], mean)
    with pytest.raises(ValueError, match="^x must"):
        gaussian_log_prob(mean, stddev, np.zeros((5, 4, 2)))
    with pytest.raises(ValueError, match="stddev_q"):
        gaussian_kl(mean, stddev, mean, stddev[0])
    with pytest.raises(ValueError, match="num_samples"):
        gaussian_sample(jax.random.PRNGKey(0), mean, stddev, 0)
    with pytest.raises(ValueError, match="stddev"):
        gaussian_entropy(np.float32(1.0))
