"""Random-shift image augmentation for pixel observations (algorithm.md §7.4, §8.2.23).

An image is padded by `pad` pixels on each side of H and W and cropped back to its size at a random
integer offset in `[0, 2·pad]` per axis, i.e. shifted by up to ±`pad` pixels with the border filled
in by the padding mode.

Two variants, both applied after batching:
  * `batch`: one offset for the whole batch with symmetric (mirror) padding — what the reference
    does, because its crop spans the full batched array;
  * `per_image`: one offset per image with edge (replicate) padding — DrQ / DrQ-v2 proper.
`observation` and `next_observation` always get independent shifts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dmpo.types import NestedArray, Transition

PADDING_MODES = ("symmetric", "edge")

# `LearnerConfig.augmentation` (other than "none") → (one offset per image?, padding mode): the
# reference's one shift per batch with mirror padding (algorithm.md §7.4), or DrQ's per-image shift with
# replicate padding. The one table of augmentation modes; the learner passes its config value here.
AUGMENTATION_MODES = {"batch_shift": (False, "symmetric"), "image_shift": (True, "edge")}


def random_shift(
    key: jax.Array,
    images: jax.Array,
    pad: int = 4,
    per_image: bool = False,
    mode: str = "symmetric",
) -> jax.Array:
    """Pads H and W by `pad` and crops the original size at a random offset.

    Args:
      key: PRNG key.
      images: `[B, ..., H, W, C]`, any dtype (kept). Axes between B and H (e.g. stacked frames)
        share their image's offset.
      pad: pixels added on each side; offsets are drawn uniformly from `[0, 2·pad]` per axis.
      per_image: draw one offset per image along B, else a single offset for the whole batch.
      mode: `'symmetric'` (mirror, edge pixel repeated) or `'edge'` (replicate) padding.

    Returns:
      The shifted images, same shape and dtype.
    """
    shape = jnp.shape(images)
    if len(shape) < 4:
        raise ValueError(f"images must be [B, ..., H, W, C] with at least 4 axes, got shape {shape}")
    if not isinstance(pad, int) or pad < 0:
        raise ValueError(f"pad must be a non-negative integer, got {pad!r}")
    if mode not in PADDING_MODES:
        raise ValueError(f"mode must be one of {PADDING_MODES}, got {mode!r}")
    if pad == 0:
        return images
    widths = [(0, 0)] * (len(shape) - 3) + [(pad, pad), (pad, pad), (0, 0)]
    padded = jnp.pad(images, widths, mode=mode)

    def crop(image: jax.Array, offset: jax.Array) -> jax.Array:
        start = (0,) * (image.ndim - 3) + (offset[0], offset[1], 0)
        return jax.lax.dynamic_slice(image, start, image.shape[:-3] + shape[-3:])

    if per_image:
        offsets = jax.random.randint(key, (shape[0], 2), 0, 2 * pad + 1)
        return jax.vmap(crop)(padded, offsets)
    return crop(padded, jax.random.randint(key, (2,), 0, 2 * pad + 1))


def is_pixels(leaf: NestedArray) -> bool:
    """A leaf is treated as a batch of images iff it is `uint8` with at least 4 axes."""
    return jnp.result_type(leaf) == jnp.uint8 and jnp.ndim(leaf) >= 4


def _shift_pixel_leaves(
    key: jax.Array, nest: NestedArray, pad: int, per_image: bool, mode: str
) -> NestedArray:
    leaves, treedef = jax.tree_util.tree_flatten(nest)
    if not leaves:
        return nest
    keys = jax.random.split(key, len(leaves))
    shifted = [random_shift(k, leaf, pad, per_image, mode) if is_pixels(leaf) else leaf
               for k, leaf in zip(keys, leaves, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, shifted)


def augment_transition(key: jax.Array, transition: Transition, mode: str, pad: int = 4) -> Transition:
    """Shifts the pixel leaves of `observation` and `next_observation` with independent offsets.

    `mode` is `'batch_shift'` (one offset per batch, symmetric padding, the reference) or
    `'image_shift'` (one offset per image, edge padding, DrQ): `LearnerConfig.augmentation`'s values.
    Non-pixel leaves (see `is_pixels`) and the other fields are returned unchanged.
    """
    if mode not in AUGMENTATION_MODES:
        raise ValueError(f"mode must be one of {tuple(AUGMENTATION_MODES)}, got {mode!r}")
    per_image, padding = AUGMENTATION_MODES[mode]
    key_observation, key_next = jax.random.split(key)
    return transition._replace(
        observation=_shift_pixel_leaves(key_observation, transition.observation, pad, per_image, padding),
        next_observation=_shift_pixel_leaves(key_next, transition.next_observation, pad, per_image, padding),
    )
