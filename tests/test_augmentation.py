"""Random-shift augmentation: every output is a crop of the padded input at an in-range offset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dmpo.agent.augmentation import augment_transition, is_pixels, random_shift
from dmpo.types import Transition


def _images(shape, seed=0, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    return rng.uniform(size=shape).astype(dtype)


def recover_offsets(images, shifted, pad, mode):
    """All `(dy, dx)` for which `shifted[b]` equals the `np.pad(mode)` crop of `images[b]`, per image."""
    images, shifted = np.asarray(images), np.asarray(shifted)
    height, width = images.shape[-3:-1]
    widths = [(0, 0)] * (images.ndim - 3) + [(pad, pad), (pad, pad), (0, 0)]
    padded = np.pad(images, widths, mode=mode)
    found = []
    for b in range(len(images)):
        found.append(
            [
                (dy, dx)
                for dy in range(2 * pad + 1)
                for dx in range(2 * pad + 1)
                if np.array_equal(padded[b, ..., dy : dy + height, dx : dx + width, :], shifted[b])
            ]
        )
    return found


def _single_offsets(images, shifted, pad, mode):
    found = recover_offsets(images, shifted, pad, mode)
    assert all(len(offsets) == 1 for offsets in found), found  # random images: the crop is unique
    return [offsets[0] for offsets in found]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("mode", ["symmetric", "edge"])
@pytest.mark.parametrize("per_image", [False, True])
def test_output_is_an_in_range_crop_of_the_padded_input(per_image, mode, jit):
    images = _images((16, 10, 12, 6), seed=1)
    shift = jax.jit(random_shift, static_argnums=(2, 3, 4)) if jit else random_shift
    shifted = shift(jax.random.PRNGKey(1), images, 3, per_image, mode)
    assert shifted.shape == images.shape and shifted.dtype == jnp.uint8
    offsets = _single_offsets(images, shifted, 3, mode)  # the search only covers [0, 2·pad]
    if per_image:
        assert len(set(offsets)) > 1  # 16 independent draws from 49 offsets
    else:
        assert len(set(offsets)) == 1


@pytest.mark.parametrize("mode", ["symmetric", "edge"])
def test_padding_mode_shows_at_the_borders(mode):
    # Many images so that some are shifted; those must match this padding mode and not the other.
    pad, size = 2, 8
    images = _images((32, size, size, 3), seed=2)
    shifted = np.asarray(random_shift(jax.random.PRNGKey(2), images, pad=pad, per_image=True, mode=mode))
    offsets = _single_offsets(images, shifted, pad, mode)
    other = "edge" if mode == "symmetric" else "symmetric"
    # The modes differ only from the second padding row/column on (both repeat the edge first), so
    # they are told apart by images moved by the full pad along some axis.
    moved = [b for b, offset in enumerate(offsets) if {0, 2 * pad} & set(offset)]
    assert moved
    for b in moved:
        assert recover_offsets(images[b : b + 1], shifted[b : b + 1], pad, other) == [[]]
    # By hand: an image moved down by the full pad (dy = 0) starts with two padding rows, copies of
    # image rows (0, 0) with edge padding and (1, 0) with symmetric (mirror incl. the edge) padding.
    source_rows = (0, 0) if mode == "edge" else (1, 0)
    checked = 0
    for b, (dy, dx) in enumerate(offsets):
        if dy != 0:
            continue
        columns = np.arange(max(0, pad - dx), min(size, size + pad - dx))  # columns inside the image
        for row, source in enumerate(source_rows):
            np.testing.assert_array_equal(shifted[b, row, columns], images[b, source, columns + dx - pad])
        checked += 1
    assert checked > 0


def test_offsets_cover_the_whole_range_uniformly():
    images = np.broadcast_to(_images((1, 6, 6, 1), seed=3), (400, 6, 6, 1))
    shifted = random_shift(jax.random.PRNGKey(3), images, pad=1, per_image=True, mode="edge")
    found = recover_offsets(images, shifted, 1, "edge")
    counts = {}
    for offsets in found:
        assert len(offsets) == 1
        counts[offsets[0]] = counts.get(offsets[0], 0) + 1
    assert set(counts) == {(dy, dx) for dy in range(3) for dx in range(3)}
    assert min(counts.values()) > 400 / 9 / 2  # each of 9 offsets has expected count ≈ 44


def test_deterministic_for_a_fixed_key_and_float_images_supported():
    images = _images((4, 9, 9, 3), seed=4, dtype=np.float32)
    a = random_shift(jax.random.PRNGKey(4), images, per_image=True, mode="edge")
    b = random_shift(jax.random.PRNGKey(4), images, per_image=True, mode="edge")
    np.testing.assert_array_equal(a, b)
    assert a.dtype == jnp.float32
    _single_offsets(images, a, 4, "edge")
    keys_differ = [
        not np.array_equal(a, random_shift(jax.random.PRNGKey(k), images, per_image=True, mode="edge"))
        for k in range(5, 8)
    ]
    assert any(keys_differ)


def test_stacked_frames_share_their_image_offset():
    images = _images((6, 3, 10, 10, 3), seed=5)  # [B, F, H, W, C]
    shifted = random_shift(jax.random.PRNGKey(5), images, pad=2, per_image=True, mode="edge")
    assert shifted.shape == images.shape
    # Each image (all its frames at once) is one crop: the recovery compares the whole [F, H, W, C].
    _single_offsets(images, shifted, 2, "edge")


def test_zero_pad_is_identity_and_bad_arguments_raise():
    images = _images((2, 5, 5, 3))
    np.testing.assert_array_equal(random_shift(jax.random.PRNGKey(0), images, pad=0), images)
    with pytest.raises(ValueError, match="images"):
        random_shift(jax.random.PRNGKey(0), images[0])
    with pytest.raises(ValueError, match="pad"):
        random_shift(jax.random.PRNGKey(0), images, pad=-1)
    with pytest.raises(ValueError, match="mode"):
        random_shift(jax.random.PRNGKey(0), images, mode="reflect")


def _transition(batch=8):
    pixels = _images((batch, 10, 10, 6), seed=6)
    return Transition(
        observation={
            "pixels": pixels,
            "state": np.ones((batch, 3), np.float32),
            "float_image": np.zeros((batch, 4, 4, 3, 1), np.float32),
        },
        action=np.zeros((batch, 2), np.float32),
        reward=np.arange(batch, dtype=np.float32),
        discount=np.ones(batch, np.float32),
        next_observation={
            "pixels": pixels.copy(),
            "state": np.full((batch, 3), 2.0, np.float32),
            "float_image": np.zeros((batch, 4, 4, 3, 1), np.float32),
        },
    )


@pytest.mark.parametrize("mode", ["batch_shift", "image_shift"])
def test_augment_transition_shifts_only_pixels_independently(mode):
    transition = _transition()
    padding = "symmetric" if mode == "batch_shift" else "edge"
    pixels = transition.observation["pixels"]
    pairs = []
    for seed in range(4):
        out = jax.jit(augment_transition, static_argnums=2)(jax.random.PRNGKey(seed), transition, mode)
        obs_offsets = _single_offsets(pixels, out.observation["pixels"], 4, padding)
        next_offsets = _single_offsets(pixels, out.next_observation["pixels"], 4, padding)
        assert (len(set(obs_offsets)) == 1) == (mode == "batch_shift")
        pairs.append((obs_offsets, next_offsets))
        # Everything that is not a uint8 image batch passes through unchanged.
        for field in ("action", "reward", "discount"):
            np.testing.assert_array_equal(getattr(out, field), getattr(transition, field))
        for name in ("state", "float_image"):
            np.testing.assert_array_equal(out.observation[name], transition.observation[name])
            np.testing.assert_array_equal(out.next_observation[name], transition.next_observation[name])
    # Observation and next observation are identical inputs but get independent shifts.
    assert any(obs != nxt for obs, nxt in pairs)
    # Same key, same shifts: rebuilding the crops from the offsets found for key 0 reproduces them.
    again = augment_transition(jax.random.PRNGKey(0), transition, mode)
    np.testing.assert_array_equal(again.observation["pixels"], _crop_of(pixels, pairs[0][0], padding))


def _crop_of(images, offsets, mode, pad=4):
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode=mode)
    height, width = images.shape[1:3]
    return np.stack([padded[b, dy : dy + height, dx : dx + width] for b, (dy, dx) in enumerate(offsets)])


def test_augment_transition_plain_array_observation_and_bad_mode():
    transition = _transition()._replace(
        observation=_images((8, 10, 10, 3), seed=7), next_observation=_images((8, 10, 10, 3), seed=8)
    )
    out = augment_transition(jax.random.PRNGKey(9), transition, "image_shift")
    _single_offsets(transition.observation, out.observation, 4, "edge")
    _single_offsets(transition.next_observation, out.next_observation, 4, "edge")
    with pytest.raises(ValueError, match="mode"):
        augment_transition(jax.random.PRNGKey(0), transition, "none")


def test_is_pixels():
    assert is_pixels(np.zeros((2, 4, 4, 3), np.uint8))
    assert is_pixels(np.zeros((2, 3, 4, 4, 3), np.uint8))
    assert not is_pixels(np.zeros((2, 4, 4, 3), np.float32))
    assert not is_pixels(np.zeros((4, 4, 3), np.uint8))
