"""Fast, checked flattening of one fixed nest structure (the replay hot path).

`dm-tree` is general but costs ~10 µs to check a structure and ~20 µs to rebuild one; a table
checks and flattens every inserted item and rebuilds every sampled batch, always against the same
structure. `CompiledNest` walks that structure once at construction and turns it into closures
that flatten (checking container types and dict keys on the way) and rebuild in a few µs.

Leaf order equals `tree.flatten` order (dicts by sorted key, sequences and named tuples in field
order), so flat lists interoperate with dm-tree. Paths are rendered the way a reader would write
the access, e.g. ``Transition.observation['position']`` or ``item[1]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tree


class StructureError(ValueError):
    """A value does not have the structure (container types, keys, lengths) of the reference nest."""


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def format_path(root: str, path: Sequence[Any], kinds: Sequence[str]) -> str:
    """Render `path` (keys from the root) as Python access syntax; `kinds[i]` is 'attr' or 'index'."""
    text = root
    for key, kind in zip(path, kinds, strict=True):
        text += f".{key}" if kind == "attr" else f"[{key!r}]"
    return text


_Flattener = Callable[[Any, list], None]
_Builder = Callable[[Sequence[Any]], Any]


class CompiledNest:
    """Flatten/unflatten closures specialised to one reference structure.

    Attributes:
      paths: one rendered path per leaf, in flat order.
      leaves: the reference leaves in flat order.
    """

    def __init__(self, structure: Any):
        self.structure = structure
        root = type(structure).__name__ if _is_namedtuple(structure) else "item"
        self.paths: list[str] = []
        self.leaves: list[Any] = []
        self._flatten = self._compile_flatten(structure, root, [], [])
        self._build, used = self._compile_build(structure, 0)
        assert used == len(self.leaves)

    @property
    def num_leaves(self) -> int:
        return len(self.leaves)

    def flatten(self, value: Any) -> list:
        """Leaves of `value` in flat order; StructureError naming the path if the structure differs."""
        out: list = []
        self._flatten(value, out)
        return out

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """The reference structure with `leaves` (flat order) in place of its leaves."""
        if len(leaves) != len(self.leaves):
            raise ValueError(f"expected {len(self.leaves)} leaves, got {len(leaves)}")
        return self._build(leaves)

    # -- compilation -------------------------------------------------------------------------

    def _compile_flatten(self, node: Any, root: str, path: list, kinds: list) -> _Flattener:
        where = format_path(root, path, kinds)
        if not tree.is_nested(node):
            self.paths.append(where)
            self.leaves.append(node)

            def flatten_leaf(value: Any, out: list) -> None:
                out.append(value)  # shape/dtype checks live in Signature

            return flatten_leaf
        if _is_namedtuple(node):
            keys, label, children_of = (
                list(type(node)._fields),
                "attr",
                _namedtuple_children(type(node), where),
            )
        elif isinstance(node, Mapping):
            keys, label, children_of = sorted(node), "index", _mapping_children(sorted(node), where)
        elif isinstance(node, list | tuple):
            keys, label, children_of = list(range(len(node))), "index", _sequence_children(len(node), where)
        else:
            raise TypeError(f"{where}: unsupported container type {type(node).__name__}")
        values = children_of(node)
        children = [
            self._compile_flatten(child, root, [*path, key], [*kinds, label])
            for key, child in zip(keys, values, strict=True)
        ]

        def flatten_container(value: Any, out: list) -> None:
            for child_fn, child in zip(children, children_of(value), strict=True):
                child_fn(child, out)

        return flatten_container

    def _compile_build(self, node: Any, offset: int) -> tuple[_Builder, int]:
        if _is_namedtuple(node):
            parts, offset = self._compile_children(list(node), offset)
            cls = type(node)
            return (lambda leaves: cls(*[part(leaves) for part in parts])), offset
        if isinstance(node, Mapping):
            keys = sorted(node)
            parts, offset = self._compile_children([node[k] for k in keys], offset)
            return (lambda leaves: {k: part(leaves) for k, part in zip(keys, parts, strict=True)}), offset
        if isinstance(node, list | tuple):
            parts, offset = self._compile_children(list(node), offset)
            seq_type = type(node)
            return (lambda leaves: seq_type(part(leaves) for part in parts)), offset
        index = offset
        return (lambda leaves: leaves[index]), offset + 1

    def _compile_children(self, children: list, offset: int) -> tuple[list[_Builder], int]:
        parts = []
        for child in children:
            part, offset = self._compile_build(child, offset)
            parts.append(part)
        return parts, offset


def _namedtuple_children(cls: type, where: str) -> Callable[[Any], Any]:
    def children(value: Any) -> Any:
        if not isinstance(value, cls):
            raise StructureError(f"{where}: expected {cls.__name__}, got {type(value).__name__}")
        return value

    return children


def _mapping_children(keys: list, where: str) -> Callable[[Any], list]:
    key_set = set(keys)

    def children(value: Any) -> list:
        if not isinstance(value, Mapping) or value.keys() != key_set:
            got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise StructureError(f"{where}: expected a mapping with keys {keys}, got {got}")
        return [value[k] for k in keys]

    return children


def _sequence_children(length: int, where: str) -> Callable[[Any], Any]:
    def children(value: Any) -> Any:
        if not isinstance(value, list | tuple) or _is_namedtuple(value) or len(value) != length:
            got = type(value).__name__
            if isinstance(value, Sequence):
                got += f" of length {len(value)}"
            raise StructureError(f"{where}: expected a list/tuple of length {length}, got {got}")
        return value

    return children


def broadcast_structures(a: Any, b: Any) -> tuple[Any, Any]:
    """Give a leaf the structure of the other argument's nest (by repetition).

    Used for rewards against discounts: a single discount applies to every reward leaf and vice
    versa. Two nests must already share a structure.
    """
    a_nested, b_nested = tree.is_nested(a), tree.is_nested(b)
    if a_nested and not b_nested:
        return a, tree.map_structure(lambda _: b, a)
    if b_nested and not a_nested:
        return tree.map_structure(lambda _: a, b), b
    if a_nested and b_nested:
        tree.assert_same_structure(a, b)
    return a, b
