"""Exporting a policy snapshot for runtimes without dmpo: ONNX (jax2onnx) and serialized StableHLO.

The exported function is the *deterministic* policy `load_policy` acts with: observation network, then
the Gaussian head's mean, batched. It takes one input, `observation`, of shape `[B, ...]`:

* state tasks: float32 `[B, F]`, the observation flattened as the agent flattens it (`BatchFlatten`:
  the entries of a dict observation concatenated in sorted key order, each raveled);
  `dmpo.envs.observations.flatten_observation` computes it from a dm_control / gym observation;
* pixel tasks: the image stack as the environment returns it (uint8 `[B, H, W, C]`).

and returns `action` float32 `[B, D]`: the policy mean, *not* clipped to the action bounds (the
environment wrapper clips, as in training); the bounds are stored in the ONNX metadata. `B` is symbolic
in both formats, so any batch size runs.

ONNX goes through jax2onnx (the `[export]` extra), which converts the traced JAX program operator by
operator; StableHLO goes through `jax.export` (in JAX itself): `jax.export.deserialize(blob).call(x)`
runs it again in any JAX of a compatible version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from dmpo.policies.snapshot import LoadedPolicy, SnapshotError, load_policy

__all__ = ["ExportError", "FORMATS", "export_policy", "input_spec", "policy_function", "resolve_snapshot"]

Format = Literal["onnx", "stablehlo"]
FORMATS: tuple[str, ...] = ("onnx", "stablehlo")
INPUT_NAME, OUTPUT_NAME = "observation", "action"


class ExportError(ValueError):
    """An export cannot be made: missing snapshot or extra, bad output path, unsupported policy."""


def resolve_snapshot(target: str | os.PathLike[str], *, best: bool = False) -> Path:
    """The snapshot file a run folder (or a file) names: snapshots/policy.msgpack, or best.msgpack."""
    path = Path(target)
    if path.is_dir():
        path = path / "snapshots" / ("best.msgpack" if best else "policy.msgpack")
        if not path.is_file():
            what = "best-policy snapshot (written when an evaluation beats the best so far)" if best \
                else "policy snapshot"
            raise ExportError(f"no {what} at {path}")
    elif best:
        raise ExportError(f"--best reads snapshots/best.msgpack of a run folder; {path} is not a folder")
    elif not path.is_file():
        raise ExportError(f"no run folder or snapshot file at {path}")
    return path


def input_spec(policy: LoadedPolicy) -> tuple[tuple[int, ...], np.dtype]:
    """Shape (without the batch axis) and dtype of the exported function's `observation` input."""
    spec = policy.environment_spec.observations
    if policy.network_config.observation_network == "flatten":
        size = sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(spec))
        return (size,), np.dtype(np.float32)
    if isinstance(spec, dict):
        raise ExportError("pixel policies with a dict observation cannot be exported (one image input)")
    return tuple(spec.shape), np.dtype(spec.dtype)


def policy_function(policy: LoadedPolicy) -> Any:
    """`f(observation [B, ...]) -> action mean [B, D]` with the policy's parameters closed over.

    For state policies the flat vector goes straight into `BatchFlatten`, which leaves a `[B, F]`
    array as it is: the same computation `load_policy` does after it concatenates the entries."""
    networks, params = policy.networks, policy.params

    def act(observation: jax.Array) -> jax.Array:
        mean, _ = networks.apply_policy(params, observation)
        return mean

    return act


def _export_stablehlo(function: Any, shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    from jax import export

    (batch,) = export.symbolic_shape("B")
    exported = export.export(jax.jit(function))(jax.ShapeDtypeStruct((batch, *shape), dtype))
    return bytes(exported.serialize())


def _export_onnx(function: Any, shape: tuple[int, ...], dtype: np.dtype, policy: LoadedPolicy) -> bytes:
    import jax2onnx  # present: export_policy checked before loading the snapshot
    import onnx

    model = jax2onnx.to_onnx(function, inputs=[jax.ShapeDtypeStruct(("B", *shape), jnp.dtype(dtype))],
                             model_name="dmpo_policy", input_names=[INPUT_NAME], output_names=[OUTPUT_NAME])
    spec = policy.environment_spec.actions
    metadata = {
        "dmpo_format": "deterministic policy (action = policy mean, not clipped)",
        "action_minimum": json.dumps(np.broadcast_to(spec.minimum, spec.shape).tolist()),
        "action_maximum": json.dumps(np.broadcast_to(spec.maximum, spec.shape).tolist()),
        "env": str(policy.metadata.get("env", "")),
    }
    onnx.helper.set_model_props(model, metadata)
    return model.SerializeToString()


def export_policy(target: str | os.PathLike[str], output: str | os.PathLike[str], fmt: Format, *,
                  best: bool = False) -> Path:
    """Writes the deterministic policy of `target` (run folder or snapshot file) to `output` as `fmt`.

    Every check (format, snapshot, output folder, extra) runs before the export; the file is written
    atomically, so an existing file at `output` is replaced whole or not at all."""
    from dmpo.utils.files import atomic_write_bytes

    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {list(FORMATS)}, got {fmt!r}")
    output = Path(output)
    folder = output.resolve().parent
    if output.is_dir():
        raise ExportError(f"-o {output} is a folder; give a file name, e.g. {output / ('policy.' + fmt)}")
    if not folder.is_dir():
        raise ExportError(f"-o {output}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ExportError(f"-o {output}: the folder {folder} is not writable")
    if fmt == "onnx":
        try:
            import jax2onnx  # noqa: F401 - checked before the snapshot is loaded
            import onnx  # noqa: F401
        except ImportError as error:
            raise ExportError("--format onnx needs the export extra: pip install 'dmpo[export]' "
                              f"({error.name} is missing)") from error
    path = resolve_snapshot(target, best=best)
    try:
        policy = load_policy(path)
    except SnapshotError as error:
        raise ExportError(str(error)) from error
    shape, dtype = input_spec(policy)
    function = policy_function(policy)
    blob = _export_onnx(function, shape, dtype, policy) if fmt == "onnx" \
        else _export_stablehlo(function, shape, dtype)
    atomic_write_bytes(output, blob)
    return output
