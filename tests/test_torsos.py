"""Pixel torsos: shapes, parameter counts, uint8 handling and a numpy re-implementation of each forward."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dmpo.agent.networks.torsos import DrQTorso, ImpalaTorso, ResidualBlock, to_unit_interval


def _images(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def _same_padding(size, stride, window=3):
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + window - size, 0)
    return out, (total // 2, total - total // 2)


def _windows(x, stride, pad_value, window=3):
    """Yields `(i, j, view)` for every offset of a SAME-padded 3×3 window over `[B, H, W, C]`."""
    out_h, pad_h = _same_padding(x.shape[1], stride)
    out_w, pad_w = _same_padding(x.shape[2], stride)
    padded = np.pad(x, ((0, 0), pad_h, pad_w, (0, 0)), constant_values=pad_value)
    for i in range(window):
        for j in range(window):
            yield i, j, padded[:, i:i + stride * out_h:stride, j:j + stride * out_w:stride]


def np_conv(x, params, stride=1):
    kernel, bias = np.asarray(params["kernel"], np.float64), np.asarray(params["bias"], np.float64)
    windows = _windows(x, stride, 0.0)
    return sum(np.einsum("bhwc,cd->bhwd", view, kernel[i, j]) for i, j, view in windows) + bias


def np_max_pool(x):
    return np.max(np.stack([view for _, _, view in _windows(x, 2, -np.inf)]), axis=0)


def relu(x):
    return np.maximum(x, 0.0)


def np_impala(params, images):
    x = images.astype(np.float64) / 255.0
    block = 0
    for stage in range(3):
        x = np_max_pool(np_conv(x, params[f"Conv_{stage}"]))
        for _ in range(2):
            p = params[f"ResidualBlock_{block}"]
            x = x + np_conv(relu(np_conv(relu(x), p["Conv_0"])), p["Conv_1"])
            block += 1
    x = relu(x).reshape(len(x), -1)
    return x @ np.asarray(params["Dense_0"]["kernel"], np.float64) + params["Dense_0"]["bias"]


def np_drq(params, images):
    x = images.astype(np.float64) / 255.0 - 0.5
    for layer, stride in enumerate((2, 1, 1, 1)):
        x = relu(np_conv(x, params[f"Conv_{layer}"], stride))
    return x.reshape(len(x), -1)


def _conv_params(c_in, c_out):
    return 9 * c_in * c_out + c_out


def _count(variables):
    return sum(leaf.size for leaf in jax.tree_util.tree_leaves(variables))


@pytest.fixture(scope="module")
def impala():
    torso = ImpalaTorso()
    return torso, torso.init(jax.random.PRNGKey(0), np.zeros((1, 84, 84, 9), np.uint8))


@pytest.fixture(scope="module")
def drq():
    torso = DrQTorso()
    return torso, torso.init(jax.random.PRNGKey(1), np.zeros((1, 84, 84, 9), np.uint8))


def test_impala_shapes_and_parameter_count(impala):
    torso, variables = impala
    out = jax.jit(torso.apply)(variables, _images((2, 84, 84, 9)))
    assert out.shape == (2, 256) and out.dtype == jnp.float32
    # Hand count: per stage a conv into c channels and 2 blocks × 2 convs c→c; 84→42→21→11 spatially.
    expected = 0
    for c_in, c in ((9, 16), (16, 32), (32, 32)):
        expected += _conv_params(c_in, c) + 4 * _conv_params(c, c)
    expected += 11 * 11 * 32 * 256 + 256
    assert _count(variables) == expected == 10_592 + 41_632 + 46_240 + 991_488


def test_drq_shapes_and_parameter_count(drq):
    torso, variables = drq
    out = jax.jit(torso.apply)(variables, _images((2, 84, 84, 9)))
    assert out.shape == (2, 42 * 42 * 32) and out.dtype == jnp.float32
    assert _count(variables) == _conv_params(9, 32) + 3 * _conv_params(32, 32)
    assert np.all(np.asarray(out) >= 0.0)  # ends with a ReLU


@pytest.mark.parametrize("module", [ImpalaTorso, DrQTorso])
def test_uint8_input_equals_float_input_divided_by_255(module):
    torso = module()
    images = _images((3, 16, 16, 6), seed=2)
    variables = torso.init(jax.random.PRNGKey(2), images)
    from_uint8 = torso.apply(variables, images)
    from_float = torso.apply(variables, images.astype(np.float32) / 255.0)
    np.testing.assert_allclose(from_uint8, from_float, rtol=1e-5, atol=1e-6)


def test_impala_forward_matches_numpy_reference():
    torso = ImpalaTorso()
    images = _images((2, 12, 12, 6), seed=3)  # 12 → 6 → 3 → 2 spatially (asymmetric SAME pads)
    variables = torso.init(jax.random.PRNGKey(3), images)
    params = jax.tree_util.tree_map(np.asarray, variables["params"])
    # Random biases so that their placement is checked too (they are zero-initialised).
    rng = np.random.default_rng(3)
    params = jax.tree_util.tree_map(lambda x: rng.normal(size=x.shape).astype(np.float32) * 0.1
                                    if x.ndim == 1 else x, params)
    got = jax.jit(torso.apply)({"params": params}, images)
    np.testing.assert_allclose(got, np_impala(params, images), rtol=1e-4, atol=1e-4)


def test_drq_forward_matches_numpy_reference():
    torso = DrQTorso()
    images = _images((2, 12, 12, 6), seed=4)  # even size: SAME pads the stride-2 conv by (0, 1)
    variables = torso.init(jax.random.PRNGKey(4), images)
    params = jax.tree_util.tree_map(np.asarray, variables["params"])
    got = torso.apply(variables, images)
    assert got.shape == (2, 6 * 6 * 32)
    np.testing.assert_allclose(got, np_drq(params, images), rtol=1e-4, atol=1e-5)


def test_residual_block_is_pre_activation():
    block = ResidualBlock()
    x = np.random.default_rng(5).normal(size=(2, 5, 5, 4)).astype(np.float32)
    variables = block.init(jax.random.PRNGKey(5), x)
    p = jax.tree_util.tree_map(np.asarray, variables["params"])
    expected = x + np_conv(relu(np_conv(relu(x), p["Conv_0"])), p["Conv_1"])
    np.testing.assert_allclose(block.apply(variables, x), expected, rtol=1e-4, atol=1e-5)
    # With the second conv zeroed the block is exactly the identity (the skip carries x unchanged).
    zeroed = jax.tree_util.tree_map(np.zeros_like, p["Conv_1"])
    np.testing.assert_array_equal(block.apply({"params": {**p, "Conv_1": zeroed}}, x), x)


def test_drq_initialisation_is_orthogonal_with_relu_gain(drq):
    _, variables = drq
    for layer in range(4):
        kernel = np.asarray(variables["params"][f"Conv_{layer}"]["kernel"])
        columns = kernel.reshape(-1, kernel.shape[-1])
        np.testing.assert_allclose(columns.T @ columns, 2.0 * np.eye(kernel.shape[-1]), atol=1e-4)
        np.testing.assert_array_equal(variables["params"][f"Conv_{layer}"]["bias"], 0.0)


def test_impala_initialisation_matches_sonnet_default(impala):
    # Truncated normal, stddev parameter 1/sqrt(fan_in), cut at ±2 ⇒ true stddev ≈ 0.88/sqrt(fan_in).
    _, variables = impala
    kernel = np.asarray(variables["params"]["Dense_0"]["kernel"])
    fan_in = kernel.shape[0]
    np.testing.assert_allclose(kernel.std(), 0.8796 / math.sqrt(fan_in), rtol=0.01)
    assert np.abs(kernel).max() <= 2.0 / math.sqrt(fan_in) + 1e-6
    np.testing.assert_array_equal(variables["params"]["Dense_0"]["bias"], 0.0)


def test_bad_images_raise():
    with pytest.raises(ValueError, match=r"images must be \[B, H, W, C\]"):
        to_unit_interval(np.zeros((84, 84, 9), np.uint8))
    with pytest.raises(ValueError, match="dtype int32"):
        to_unit_interval(np.zeros((1, 8, 8, 3), np.int32))
    with pytest.raises(ValueError, match="images"):
        DrQTorso().init(jax.random.PRNGKey(0), np.zeros((8, 8, 3), np.uint8))
