"""A replay table's file: `save`, `restore` and `load` (algorithm.md §2; format in `persistence`).

The file holds the table's contents in insert order, its counters, its rate limiter's configuration,
its sampler's state and its RNG state, so a restored table samples what the saved one would have
sampled next. `TableFiles` is mixed into `table.Table`: saving copies a consistent snapshot under the
table's lock and writes it after releasing it; loading checks everything before it replaces
anything, so a bad file leaves the table as it was. Subclasses with other storage
(`frames.FrameStackTable`) say how through `_storage_kind`, `_storage_config` and
`_init_kwargs_from_header`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from dmpo.replay import persistence
from dmpo.replay.persistence import CheckpointError
from dmpo.replay.rate_limiters import RateLimiter, rate_limiter_from_config
from dmpo.replay.signature import Signature

if TYPE_CHECKING:
    from dmpo.replay.table import Table


class TableFiles:
    """`save` / `restore` / `load` for `table.Table` (module docstring); uses the table's state."""

    _storage_kind: str
    _lock: Any
    _storage: Any
    _sampler: Any
    _rng: np.random.Generator
    _signature: Signature
    _limiter: RateLimiter
    _insert_cv: Any
    _sample_cv: Any
    _name: str
    _max_size: int
    _inserts: int
    _samples: int
    _deletes: int

    def save(self, path: str | os.PathLike) -> None:
        """Write contents, order, counters, limiter config and RNG state atomically to `path`.

        A consistent snapshot (a copy of the live items, counters and RNG state) is taken under the
        lock; the file is written after the lock is released, so inserts, samples and `stats()` (the
        distributed health check) go on while a large table is written.
        """
        with self._lock:
            size = self._inserts - self._deletes
            header = {
                "name": self._name,
                "max_size": self._max_size,
                "signature": self._signature.to_json(),
                "counters": {"inserts": self._inserts, "samples": self._samples, "deletes": self._deletes},
                "rate_limiter": self._limiter.to_config(),
                "sampler": {"kind": self._sampler.kind, "priority_exponent": self._sampler_exponent()},
                "rng_state": self._rng.bit_generator.state,
                "storage": {"kind": self._storage_kind, **self._storage_config()},
            }
            arrays = dict(self._storage.state_arrays(size))
            arrays.update({f"sampler_{k}": v for k, v in self._sampler.state_arrays(size).items()})
            # Views into the live storage would change under the writer: copy them now.
            arrays = {k: v.copy() if v.base is not None else v for k, v in arrays.items()}
        persistence.write_archive(path, header, arrays)

    def _sampler_exponent(self) -> float:
        return getattr(self._sampler, "exponent", 1.0)

    def _storage_config(self) -> dict:
        return {}

    @classmethod
    def _init_kwargs_from_header(cls, header: dict) -> dict:
        return {}

    @classmethod
    def restore(
        cls, path: str | os.PathLike, rate_limiter: RateLimiter | None = None, *, signature: Any = None
    ) -> Table:
        """A new table holding what `save` wrote to `path`.

        The rate limiter is rebuilt from the file unless one is given. The signature is rebuilt
        from the file (Transition, dict, list and tuple nests); pass `signature` for other nests.
        """
        header, arrays = persistence.read_archive(path)
        try:
            # A given signature is checked against the file's in _load.
            saved_signature = (
                Signature(signature) if signature is not None else Signature.from_json(header["signature"])
            )
            limiter = rate_limiter or rate_limiter_from_config(header["rate_limiter"])
            table = cls(
                saved_signature.structure,
                header["max_size"],
                limiter,
                sampler=header["sampler"]["kind"],
                priority_exponent=header["sampler"]["priority_exponent"],
                name=header["name"],
                **cls._init_kwargs_from_header(header),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"{os.fspath(path)}: malformed table header ({type(err).__name__}: {err})"
            ) from err
        table._load(path, header, arrays)
        return table

    def load(self, path: str | os.PathLike) -> None:
        """Replace this table's contents, counters and RNG state with those saved in `path`.

        The file must have been saved from a table with the same signature, max_size, sampler
        and storage; this table keeps its own rate limiter. Everything is checked before anything
        is replaced, so a bad file leaves the table as it was.
        """
        header, arrays = persistence.read_archive(path)
        self._load(path, header, arrays)

    def _load(self, path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]) -> None:
        where = os.fspath(path)
        try:
            self._check_header(header)
            counters = header["counters"]
            inserts, samples, deletes = (int(counters[k]) for k in ("inserts", "samples", "deletes"))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: {err}") from err
        size = inserts - deletes
        full_or_never_evicted = size == self._max_size or (deletes == 0 and size == inserts)
        if min(inserts, samples, deletes) < 0 or not 0 <= size <= self._max_size or not full_or_never_evicted:
            raise CheckpointError(f"{where}: inconsistent counters {counters} for max_size={self._max_size}")
        sampler_arrays = {
            k.removeprefix("sampler_"): v for k, v in arrays.items() if k.startswith("sampler_")
        }
        with self._lock:
            try:
                np.random.PCG64().state = header["rng_state"]  # validate on a throwaway generator
                self._storage.check_state_arrays(arrays, size)
                self._sampler.check_state_arrays(sampler_arrays, size)
            except (KeyError, TypeError, ValueError) as err:
                raise CheckpointError(f"{where}: table contents do not match the header ({err})") from err
            self._storage.load_state_arrays(arrays, size)
            self._sampler.load_state_arrays(sampler_arrays, size)
            self._rng.bit_generator.state = header["rng_state"]
            self._inserts, self._samples, self._deletes = inserts, samples, deletes
            self._insert_cv.notify_all()
            self._sample_cv.notify_all()

    def _check_header(self, header: dict) -> None:
        if header["signature"] != self._signature.to_json():
            raise ValueError(f"saved signature {header['signature']} differs from this table's")
        expected = {
            "max_size": self._max_size,
            "sampler kind": self._sampler.kind,
            "storage": {"kind": self._storage_kind, **self._storage_config()},
        }
        saved = {
            "max_size": header["max_size"],
            "sampler kind": header["sampler"]["kind"],
            "storage": header["storage"],
        }
        for field, value in expected.items():
            if saved[field] != value:
                raise ValueError(f"saved {field} {saved[field]!r} differs from this table's {value!r}")
