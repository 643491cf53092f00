"""Item signatures: the exact shape/dtype contract of replay items (algorithm.md §2).

A signature is any nest whose leaves have `.shape` and `.dtype` (dm_env specs, numpy arrays).
`Signature` compiles it once; every insert is then checked leaf by leaf and a mismatch raises
`SignatureError` naming the field, e.g. ``Transition.observation['position']: expected
float32[5], got float64[5]``. Nothing is cast: an item that is "nearly right" (float64 actions for
a float32 table) is a bug upstream and is reported, as Reverb writers do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tree
from dm_env import specs

from dmpo.replay.nests import CompiledNest, StructureError, broadcast_structures
from dmpo.types import EnvironmentSpec, Transition

# Leaf dtypes a table can store without pickling (bool, signed/unsigned int, float, complex).
_STORABLE_KINDS = "biufc"


class SignatureError(ValueError):
    """An item (or batch) does not match the table signature; the message names the field."""


def describe(shape: Sequence[int], dtype: np.dtype) -> str:
    """``float32[5]``-style text for a shape and dtype."""
    return f"{np.dtype(dtype).name}[{','.join(str(d) for d in shape)}]"


def _describe_value(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return describe(value.shape, value.dtype)
    return f"{type(value).__name__} (not an array; use np.asarray with an explicit dtype)"


def _broadcast_reward_spec(reward: Any, discount: Any) -> specs.Array:
    shape = np.broadcast_shapes(tuple(reward.shape), tuple(discount.shape))
    dtype = np.result_type(reward.dtype, discount.dtype)
    return specs.Array(shape=shape, dtype=dtype, name=getattr(reward, "name", None) or "reward")


def transition_signature(env_spec: EnvironmentSpec) -> Transition:
    """The replay item signature for an environment (algorithm.md §2).

    Reward leaves take the broadcast shape of reward and discount and their numpy result dtype
    (the n-step sum multiplies rewards by discounts); a single discount spec is repeated over a
    nested reward (and the reverse), matching what `NStepTransitionAdder` emits.
    """
    rewards, discounts = broadcast_structures(env_spec.rewards, env_spec.discounts)
    reward_sig = tree.map_structure(_broadcast_reward_spec, rewards, discounts)
    return Transition(
        observation=env_spec.observations,
        action=env_spec.actions,
        reward=reward_sig,
        discount=discounts,
        next_observation=env_spec.observations,
    )


class Signature:
    """A compiled signature: flat paths, shapes and dtypes plus fast checked flattening."""

    def __init__(self, structure: Any):
        if isinstance(structure, Signature):
            structure = structure.structure
        self.nest = CompiledNest(structure)
        self.structure = structure
        self.paths: tuple[str, ...] = tuple(self.nest.paths)
        shapes, dtypes = [], []
        for path, leaf in zip(self.paths, self.nest.leaves, strict=True):
            if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
                raise TypeError(
                    f"signature leaf {path} must have .shape and .dtype, got {type(leaf).__name__}"
                )
            dtype = np.dtype(leaf.dtype)
            if dtype.kind not in _STORABLE_KINDS:
                raise TypeError(
                    f"signature leaf {path} has dtype {dtype}; only numeric/bool dtypes are stored"
                )
            shapes.append(tuple(int(d) for d in leaf.shape))
            dtypes.append(dtype)
        self.shapes: tuple[tuple[int, ...], ...] = tuple(shapes)
        self.dtypes: tuple[np.dtype, ...] = tuple(dtypes)
        self._checks = tuple(zip(self.shapes, self.dtypes, strict=True))

    @property
    def num_leaves(self) -> int:
        return len(self.paths)

    @property
    def bytes_per_item(self) -> int:
        return int(sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in self._checks))

    def _flatten(self, value: Any) -> list:
        try:
            return self.nest.flatten(value)
        except StructureError as err:
            raise SignatureError(str(err)) from None

    def flatten_item(self, item: Any) -> list:
        """Leaves of one unbatched item after checking structure, shapes and dtypes exactly."""
        leaves = self._flatten(item)
        for leaf, (shape, dtype) in zip(leaves, self._checks, strict=True):
            if getattr(leaf, "shape", None) != shape or getattr(leaf, "dtype", None) != dtype:
                self._raise_mismatch(leaves, ())
        return leaves

    def flatten_batch(self, items: Any) -> tuple[list, int]:
        """Leaves of a batch (leading dim on every leaf) and the batch size, checked exactly."""
        leaves = self._flatten(items)
        first = getattr(leaves[0], "shape", None) if leaves else None
        if not first:  # None, or a 0-d leaf where a batch dim is required
            self._raise_mismatch(leaves, None)
        n = first[0]
        for leaf, (shape, dtype) in zip(leaves, self._checks, strict=True):
            leaf_shape = getattr(leaf, "shape", None)
            if leaf_shape is None or leaf_shape[:1] != (n,) or leaf_shape[1:] != shape or leaf.dtype != dtype:
                self._raise_mismatch(leaves, None)
        return leaves, n

    def _raise_mismatch(self, leaves: list, batch: tuple | None) -> None:
        """Raise a SignatureError for the first bad leaf; `batch` None means 'any leading dim'."""
        lead = None
        for path, leaf, (shape, dtype) in zip(self.paths, leaves, self._checks, strict=True):
            got = _describe_value(leaf)
            if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
                raise SignatureError(f"{path}: expected {describe(shape, dtype)}, got {got}")
            leaf_shape = tuple(leaf.shape)
            if batch is None:
                if len(leaf_shape) == len(shape):
                    raise SignatureError(
                        f"{path}: expected a batch [N]+{describe(shape, dtype)}, "
                        f"got {got} (no batch dimension)"
                    )
                lead = leaf_shape[0] if lead is None else lead
                want = (lead, *shape)
                text = f"a batch [{lead}]+{describe(shape, dtype)}"
            else:
                want, text = shape, describe(shape, dtype)
            if leaf_shape != want or np.dtype(leaf.dtype) != dtype:
                raise SignatureError(f"{path}: expected {text}, got {got}")
        raise AssertionError("mismatch reported but every leaf matches")  # pragma: no cover

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        return self.nest.unflatten(leaves)

    # -- persistence ---------------------------------------------------------------------------

    def to_json(self) -> Any:
        """A JSON-serialisable description of the structure, shapes and dtypes."""
        return _encode(self.structure)

    @classmethod
    def from_json(cls, data: Any) -> Signature:
        return cls(_decode(data))


def _encode(node: Any) -> Any:
    if isinstance(node, tuple) and hasattr(type(node), "_fields"):
        return {
            "namedtuple": type(node).__name__,
            "fields": list(type(node)._fields),
            "children": [_encode(c) for c in node],
        }
    if isinstance(node, Mapping):
        for key in node:
            if not isinstance(key, str):
                raise TypeError(f"only string dict keys can be saved, got {key!r}")
        return {"dict": {k: _encode(node[k]) for k in sorted(node)}}
    if isinstance(node, list | tuple):
        return {"list" if isinstance(node, list) else "tuple": [_encode(c) for c in node]}
    return {"shape": [int(d) for d in node.shape], "dtype": np.dtype(node.dtype).str}


def _decode(data: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"malformed signature description: {data!r}")
    if "namedtuple" in data:
        if data["namedtuple"] != "Transition" or tuple(data["fields"]) != Transition._fields:
            raise ValueError(
                f"cannot rebuild named tuple {data['namedtuple']!r} from a file; pass signature= explicitly"
            )
        return Transition(*[_decode(c) for c in data["children"]])
    if "dict" in data:
        return {k: _decode(v) for k, v in data["dict"].items()}
    if "list" in data:
        return [_decode(c) for c in data["list"]]
    if "tuple" in data:
        return tuple(_decode(c) for c in data["tuple"])
    return specs.Array(shape=tuple(data["shape"]), dtype=np.dtype(data["dtype"]))
