"""Exporting a policy snapshot for runtimes without dmpo: ONNX (jax2onnx) and serialized StableHLO.

The exported function is the *deterministic* policy `load_policy` acts with: observation network, the
Gaussian head's mean, then the map onto the task's own action bounds that the environment pipeline
applies (clip to `[-1, 1]`, `low·(1 − a)/2 + high·(1 + a)/2`, clip to `[low, high]`), batched. It
takes one input, `observation`, of shape `[B, ...]`:

* state tasks: float32 `[B, F]`, the observation flattened as the agent flattens it (`BatchFlatten`:
  the entries of a dict observation concatenated in sorted key order, each raveled);
  `dmpo.envs.observations.flatten_observation` computes it from a dm_control / gym observation;
* pixel tasks: the image stack as the environment returns it (uint8 `[B, H, W, C]`).

and returns `action` float32 `[B, D]`: the action to send the task itself, inside its bounds. The
action is never NaN: a non-finite observation entry (NaN, ±inf) is replaced by 0 before the networks,
and a mean that is NaN all the same (finite entries too large for the networks) by 0, the centre of
the bounds. The ONNX graph has a second output, `observation_finite` bool `[B]`: False for a row
whose observation had a non-finite entry (its action was computed from the replaced observation, and
a runtime should treat the row as a sensor fault). `load_policy` raises instead, naming the entries.
The metadata (`metadata(policy)`: ONNX model properties; for StableHLO a `<file>.json` beside the file)
states the bounds, the observation input, the action repeat and the frame stack the policy was trained
with. `B` is symbolic in both formats, so any batch size runs.

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

from dmpo.agent.policies.snapshot import LoadedPolicy, SnapshotError, load_policy
from dmpo.utils.install import install_hint

__all__ = ["ExportError", "FORMATS", "export_policy", "input_spec", "metadata", "policy_function",
           "resolve_snapshot"]

Format = Literal["onnx", "stablehlo"]
FORMATS: tuple[str, ...] = ("onnx", "stablehlo")
INPUT_NAME, OUTPUT_NAME, FINITE_NAME = "observation", "action", "observation_finite"
_OLDEST_OPSET = 15  # the oldest checked to give models onnxruntime accepts (13 gives an invalid Reshape)


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


def policy_function(policy: LoadedPolicy, *, flag: bool = False) -> Any:
    """`f(observation [B, ...]) -> action [B, D]` in the task's bounds, parameters closed over; with
    `flag`, `-> (action, observation_finite [B])`.

    For state policies the flat vector goes straight into `BatchFlatten`, which leaves a `[B, F]`
    array as it is: the same computation `load_policy` does after it concatenates the entries. The
    map onto the bounds is the pipeline's (`dmpo.envs.interface.canonical_to_task`) in float32.
    Non-finite observation entries become 0 and a NaN mean becomes 0 (module docstring); finiteness
    is `|x| <= float max`, which NaN and ±inf fail, in operators every ONNX runtime has."""
    networks, params = policy.networks, policy.params
    low = np.asarray(policy.task.minimum, np.float32)
    high = np.asarray(policy.task.maximum, np.float32)
    half_low, half_high = 0.5 * low, 0.5 * high  # halving is exact in binary

    def act(observation: jax.Array) -> Any:
        if jnp.issubdtype(observation.dtype, jnp.floating):
            finite = jnp.abs(observation) <= jnp.finfo(observation.dtype).max
            observation = jnp.where(finite, observation, jnp.zeros_like(observation))
            rows = jnp.min(finite.reshape(finite.shape[0], -1).astype(jnp.float32), axis=1) > 0.5
        else:  # an image: integers are always finite
            rows = jnp.ones(observation.shape[:1], bool)
        mean, _ = networks.apply_policy(params, observation)
        mean = mean.astype(jnp.float32)
        unit = jnp.clip(jnp.where(mean == mean, mean, jnp.zeros_like(mean)), -1.0, 1.0)
        action = jnp.clip(half_low * (1.0 - unit) + half_high * (1.0 + unit), low, high)
        return (action, rows) if flag else action

    return act


def metadata(policy: LoadedPolicy) -> dict[str, str]:
    """What a runtime needs besides the graph, as strings (ONNX model properties are strings)."""
    from dmpo.agent.policies.snapshot import observation_input

    task = policy.task
    return {
        "dmpo_format": "deterministic policy: action = policy mean mapped onto the task's action bounds "
                       "(clipped to [-1, 1], low*(1-a)/2 + high*(1+a)/2, clipped to [low, high]); never "
                       "NaN: non-finite observation entries are replaced by 0 (ONNX: output "
                       "observation_finite [B] is false for such a row) and a NaN mean by 0, the centre "
                       "of the bounds",
        "action_minimum": json.dumps(list(task.action_minimum)),
        "action_maximum": json.dumps(list(task.action_maximum)),
        "action_dtype": task.action_dtype,
        "action_repeat": str(task.action_repeat),
        "frame_stack": str(task.frame_stack),
        "observation_input": json.dumps(observation_input(policy.environment_spec, policy.network_config)),
        "env": str(policy.metadata.get("env", "")),
        "pixels": json.dumps(bool(policy.metadata.get("pixels", False))),
        "render": json.dumps(task.render),
    }


def _export_stablehlo(function: Any, shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    from jax import export

    (batch,) = export.symbolic_shape("B")
    exported = export.export(jax.jit(function))(jax.ShapeDtypeStruct((batch, *shape), dtype))
    return bytes(exported.serialize())


def _export_onnx(function: Any, shape: tuple[int, ...], dtype: np.dtype, policy: LoadedPolicy,
                 opset: int | None) -> bytes:
    import jax2onnx  # present: export_policy checked before loading the snapshot
    import onnx

    options = {} if opset is None else {"opset": opset}  # None: what jax2onnx writes by default
    model = jax2onnx.to_onnx(function, inputs=[jax.ShapeDtypeStruct(("B", *shape), jnp.dtype(dtype))],
                             model_name="dmpo_policy", input_names=[INPUT_NAME],
                             output_names=[OUTPUT_NAME, FINITE_NAME], **options)
    onnx.helper.set_model_props(model, metadata(policy))
    return model.SerializeToString()


def _check_opset(opset: Any) -> None:
    """An opset the installed onnx package knows, or one line naming the range."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    integer = isinstance(opset, (int, np.integer)) and not isinstance(opset, bool)
    if not integer or not _OLDEST_OPSET <= opset <= newest:
        raise ExportError(f"--opset must be an integer from {_OLDEST_OPSET} to {newest} (the newest the "
                          f"installed onnx knows), got {opset!r}")


def export_policy(target: str | os.PathLike[str], output: str | os.PathLike[str], fmt: Format, *,
                  best: bool = False, opset: int | None = None) -> Path:
    """Writes the deterministic policy of `target` (run folder or snapshot file) to `output` as `fmt`.

    Every check (format, snapshot, output folder, extra, opset) runs before the export; the file is
    written atomically, so an existing file at `output` is replaced whole or not at all. StableHLO's
    metadata goes to `<output>.json`. `opset`: the ONNX opset (None: jax2onnx's default)."""
    from dmpo.utils.files import atomic_write_bytes, atomic_write_text

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
            raise ExportError(f"--format onnx needs the export extra: {install_hint('export')}; "
                              f"{error.name} is missing") from error
        if opset is not None:
            _check_opset(opset)
    elif opset is not None:
        raise ExportError(f"--opset is for --format onnx; --format {fmt} has no opset")
    path = resolve_snapshot(target, best=best)
    try:
        policy = load_policy(path)
    except SnapshotError as error:
        raise ExportError(str(error)) from error
    shape, dtype = input_spec(policy)
    if fmt == "onnx":
        function = policy_function(policy, flag=True)
        atomic_write_bytes(output, _export_onnx(function, shape, dtype, policy, opset))
    else:
        atomic_write_bytes(output, _export_stablehlo(policy_function(policy), shape, dtype))
        sidecar = output.with_name(output.name + ".json")
        atomic_write_text(sidecar, json.dumps(metadata(policy), indent=2) + "\n")
    return output
