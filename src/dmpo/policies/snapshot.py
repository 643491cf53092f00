"""Policy snapshots: a self-contained inference artifact (spec §9) and `load_policy`.

A snapshot holds what acting needs and nothing more: the network configuration, the environment
specs and the *target* observation-network and policy parameters. It is one msgpack file (no
pickle: loading it runs no code from the file), written atomically, so a reader never sees half a
snapshot. `load_policy(path)` rebuilds the networks from the configuration and returns a callable
that needs no learner, replay or optimiser.

Snapshots cover networks built by `dmpo.networks.make_networks` from a `NetworkConfig`; custom
network code is not stored in the file and cannot be rebuilt from it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
from dm_env import specs
from flax import serialization

from dmpo.acting import make_policy_fns
from dmpo.config import NetworkConfig
from dmpo.lifecycle.directory import config_from_dict, config_to_dict
from dmpo.networks import PolicyParams, init_params, make_networks
from dmpo.types import EnvironmentSpec
from dmpo.utils.files import atomic_write_bytes

FORMAT = "dmpo-policy-snapshot"
VERSION = 1


class SnapshotError(ValueError):
    """A snapshot file is missing, not a snapshot, or from an unsupported version."""


def _spec_to_dict(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {"__nest__": "dict", "items": {key: _spec_to_dict(value) for key, value in spec.items()}}
    record = {"shape": list(spec.shape), "dtype": np.dtype(spec.dtype).str, "name": spec.name or ""}
    if isinstance(spec, specs.BoundedArray):
        record["minimum"] = np.asarray(spec.minimum).tolist()
        record["maximum"] = np.asarray(spec.maximum).tolist()
    return record


def _spec_from_dict(data: Any) -> Any:
    if data.get("__nest__") == "dict":
        return {key: _spec_from_dict(value) for key, value in data["items"].items()}
    shape, dtype, name = tuple(data["shape"]), np.dtype(data["dtype"]), data["name"] or None
    if "minimum" in data:
        return specs.BoundedArray(shape, dtype, np.asarray(data["minimum"], dtype),
                                  np.asarray(data["maximum"], dtype), name=name)
    return specs.Array(shape, dtype, name=name)


def environment_spec_to_dict(env_spec: EnvironmentSpec) -> dict[str, Any]:
    return {field: _spec_to_dict(getattr(env_spec, field)) for field in EnvironmentSpec._fields}


def environment_spec_from_dict(data: dict[str, Any]) -> EnvironmentSpec:
    return EnvironmentSpec(**{field: _spec_from_dict(data[field]) for field in EnvironmentSpec._fields})


def save_policy(path: str | os.PathLike[str], env_spec: EnvironmentSpec, network_config: NetworkConfig,
                params: PolicyParams, metadata: dict[str, Any] | None = None) -> Path:
    """Writes a snapshot of `params` (target observation network + target policy) to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "network_config": config_to_dict(network_config),
        "environment_spec": environment_spec_to_dict(env_spec),
        "metadata": metadata or {},
        "params": serialization.to_state_dict(jax.device_get(dict(params._asdict()))),
    }
    atomic_write_bytes(path, serialization.msgpack_serialize(payload))
    return path


class LoadedPolicy:
    """A callable policy: `policy(observation) -> action` for one unbatched observation.

    `deterministic=True` (default) acts with the Gaussian mean, as the evaluator does; otherwise it
    samples, with randomness from `seed` and the number of actions taken so far.
    """

    def __init__(self, env_spec: EnvironmentSpec, network_config: NetworkConfig, params: PolicyParams,
                 metadata: dict[str, Any], *, deterministic: bool = True, seed: int = 0) -> None:
        self.environment_spec = env_spec
        self.network_config = network_config
        self.metadata = metadata
        self.networks = make_networks(env_spec, network_config)
        self.params = jax.device_put(params)
        self.deterministic = deterministic
        self._sample_fn, self._mean_fn = make_policy_fns(self.networks)
        self._key = jax.random.PRNGKey(seed)
        self._num_actions = 0

    def __call__(self, observation: Any) -> np.ndarray:
        if self.deterministic:
            return np.asarray(self._mean_fn(self.params, observation))
        step = np.uint32(self._num_actions)
        self._num_actions += 1
        return np.asarray(self._sample_fn(self.params, self._key, step, observation))


def load_policy(path: str | os.PathLike[str], *, deterministic: bool = True, seed: int = 0) -> LoadedPolicy:
    """Loads a snapshot written by `save_policy`: a file, or a run directory (snapshots/policy.msgpack)."""
    path = Path(path)
    if path.is_dir():
        path = path / "snapshots" / "policy.msgpack"
    if not path.is_file():
        raise SnapshotError(f"no policy snapshot at {path}")
    try:
        payload = serialization.msgpack_restore(path.read_bytes())
    except Exception as error:  # msgpack raises several unrelated types on damaged input
        raise SnapshotError(f"{path} is not a readable policy snapshot: {error}") from error
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise SnapshotError(f"{path} is not a dmpo policy snapshot (format field missing or wrong)")
    if payload.get("version") != VERSION:
        raise SnapshotError(f"{path} has snapshot version {payload.get('version')!r}; "
                            f"this dmpo reads version {VERSION}")
    env_spec = environment_spec_from_dict(payload["environment_spec"])
    network_config = config_from_dict(payload["network_config"], NetworkConfig)
    networks = make_networks(env_spec, network_config)
    # Only the structure is needed: shapes alone, without computing (or compiling) an initialisation.
    template = jax.eval_shape(functools.partial(init_params, networks, env_spec), jax.random.PRNGKey(0))
    template = {"observation": template.observation, "policy": template.policy}
    restored = serialization.from_state_dict(template, payload["params"])
    params = PolicyParams(observation=restored["observation"], policy=restored["policy"])
    return LoadedPolicy(env_spec, network_config, params, payload.get("metadata", {}),
                        deterministic=deterministic, seed=seed)
