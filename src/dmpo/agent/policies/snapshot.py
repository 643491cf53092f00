"""Policy snapshots: a self-contained inference artifact (algorithm.md §9) and `load_policy`.

A snapshot holds what acting needs and nothing more: the network configuration, the environment
specs, the *target* observation-network and policy parameters, and (since version 2) what lies
between the agent and the task: the task's own action bounds and the map onto them from the canonical
box, the observation's flattening, the action repeat and the frame stack. It is one msgpack file (no
pickle: loading it runs no code from the file), written atomically, so a reader never sees half a
snapshot. `load_policy(path)` rebuilds the networks from the configuration and returns a
`LoadedPolicy` that needs no learner, replay or optimiser and acts in the task's own bounds.

The file starts with the header of `dmpo.utils.formats`: `"format": "dmpo.policy"` and its
`"format_version"` (3). Versions 1 and 2 were written as `"format": "dmpo-policy-snapshot"` with a
`"version"` key; both still load. Version 3 changed only the header. A version-1 snapshot (no task
record) loads with a warning, acting in the canonical `[-1, 1]` box.

Snapshots cover networks built by `dmpo.agent.networks.make_networks` from a `NetworkConfig`; custom
network code is not stored in the file and cannot be rebuilt from it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tree
from dm_env import specs
from flax import serialization

from dmpo.agent.networks import PolicyParams, init_params, make_networks
from dmpo.agent.policies.loaded import LoadedPolicy
from dmpo.config import NetworkConfig
from dmpo.config.files import config_from_dict, config_to_dict
from dmpo.envs.interface import TaskInterface
from dmpo.types import EnvironmentSpec
from dmpo.utils.files import atomic_write_bytes
from dmpo.utils.formats import SNAPSHOT, read_header

__all__ = ["FORMAT", "VERSION", "LoadedPolicy", "SnapshotError", "load_policy", "observation_input",
           "save_policy", "save_policy_on_interrupt"]

FORMAT, VERSION = SNAPSHOT.name, SNAPSHOT.version


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


_SPEC_FIELDS = ("observations", "actions", "rewards", "discounts")


def environment_spec_to_dict(env_spec: EnvironmentSpec) -> dict[str, Any]:
    record = {field: _spec_to_dict(getattr(env_spec, field)) for field in _SPEC_FIELDS}
    if env_spec.task is not None:
        record["task"] = env_spec.task.to_dict()
    return record


def environment_spec_from_dict(data: dict[str, Any]) -> EnvironmentSpec:
    task = TaskInterface.from_dict(data["task"]) if "task" in data else None
    return EnvironmentSpec(**{field: _spec_from_dict(data[field]) for field in _SPEC_FIELDS}, task=task)


def observation_input(env_spec: EnvironmentSpec, network_config: NetworkConfig) -> dict[str, Any]:
    """How an observation enters the networks: flattened (state torso: the entries in the order
    `dmpo.envs.observations.flatten_observation` concatenates them, each raveled, as float32) or as
    the array the environment gives (pixel torsos)."""
    spec = env_spec.observations
    if network_config.observation_network == "flatten":
        entries = [{"name": "/".join(str(part) for part in path) or "observation", "shape": list(leaf.shape)}
                   for path, leaf in tree.flatten_with_path(spec)]
        size = sum(int(np.prod(leaf.shape)) for leaf in tree.flatten(spec))
        return {"flattened": True, "entries": entries, "shape": [size], "dtype": "float32"}
    if isinstance(spec, dict):
        return {"flattened": False, "entries": [{"name": "/".join(map(str, path)), "shape": list(leaf.shape),
                                                 "dtype": np.dtype(leaf.dtype).name}
                                                for path, leaf in tree.flatten_with_path(spec)]}
    return {"flattened": False, "shape": list(spec.shape), "dtype": np.dtype(spec.dtype).name}


def _task_of(env_spec: EnvironmentSpec, metadata: dict[str, Any]) -> TaskInterface:
    if env_spec.task is not None:
        return env_spec.task
    # An environment outside the pipeline: the agent's bounds are the task's own.
    return TaskInterface.canonical(env_spec.actions, action_repeat=metadata.get("action_repeat") or 1)


def save_policy(path: str | os.PathLike[str], env_spec: EnvironmentSpec, network_config: NetworkConfig,
                params: PolicyParams, metadata: dict[str, Any] | None = None) -> Path:
    """Writes a snapshot of `params` (target observation network + target policy) to `path`.

    The task record comes from `env_spec.task` (`make_environment_spec` of a pipeline environment);
    without one the canonical bounds are the task's own."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = dict(metadata or {})
    payload = {
        **SNAPSHOT.header(),
        "network_config": config_to_dict(network_config),
        "environment_spec": environment_spec_to_dict(env_spec._replace(task=None)),
        "task": _task_of(env_spec, metadata).to_dict(),
        "observation_input": observation_input(env_spec, network_config),
        "metadata": metadata,
        "params": serialization.to_state_dict(jax.device_get(dict(params._asdict()))),
    }
    atomic_write_bytes(path, serialization.msgpack_serialize(payload))
    return path


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
    version = read_header(payload, SNAPSHOT, str(path), SnapshotError)
    env_spec = environment_spec_from_dict(payload["environment_spec"])
    metadata = payload.get("metadata", {})
    if version == 1:
        warnings.warn(f"{path} is a version-1 policy snapshot, which does not record the task's action "
                      "bounds: its actions are in the canonical [-1, 1] box (save it again with this dmpo, "
                      "e.g. by resuming the run, to record them)", UserWarning, stacklevel=2)
        task = TaskInterface.canonical(env_spec.actions, action_repeat=metadata.get("action_repeat") or 1)
    else:
        task = TaskInterface.from_dict(payload["task"])
    network_config = config_from_dict(payload["network_config"], NetworkConfig)
    networks = make_networks(env_spec, network_config)
    # Only the structure is needed: shapes alone, without computing (or compiling) an initialisation.
    template = jax.eval_shape(functools.partial(init_params, networks, env_spec), jax.random.PRNGKey(0))
    template = {"observation": template.observation, "policy": template.policy}
    restored = serialization.from_state_dict(template, payload["params"])
    params = PolicyParams(observation=restored["observation"], policy=restored["policy"])
    return LoadedPolicy(env_spec._replace(task=task), network_config, params, metadata, task=task,
                        deterministic=deterministic, seed=seed)


def save_policy_on_interrupt(save: Callable[[], Any]) -> None:
    """Writes the policy snapshot of an interrupted run, before its final checkpoint, so that every
    run with a checkpoint can be evaluated and exported. `save` writes it (the trainer's own method).
    A failure is reported on stderr and does not stop the checkpoint that follows: the snapshot can
    be written again from that checkpoint, the training state could not."""
    try:
        save()
    except Exception as error:  # noqa: BLE001 - any failure here must leave the checkpoint its chance
        with contextlib.suppress(OSError, ValueError):
            print(f"dmpo: warning: the interrupted run's policy snapshot was not written: "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
