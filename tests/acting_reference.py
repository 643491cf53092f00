"""The stored reference run that proves `num_envs = 1` trains bit-identically to the code before
vectorized acting.

`reference_run(directory)` trains a tiny synchronous-learner run on `FakeEnvironment` (episodes of 9
steps, so checkpoint boundaries fall inside episodes and the environment is re-created per segment)
and returns a digest of its final checkpoint: sha256 of the learner state's leaves (params,
optimizer state, step, key), sha256 of the replay contents, the counters, the actor's action count,
and a few float values to show how far apart two runs are when the hashes differ;
`learner_values(directory)` returns every leaf of that learner state.

XLA rounds float32 differently on different CPU families (AVX-512 on the Intel Xeons against AVX2 on
the AMD EPYCs these machines come with): the same code gives one learner hash per CPU model. The
stored file therefore holds one digest per CPU model, every one made with the code of one commit
from before the change (`made_at_commit`), and the full learner values of one of them, which a run
on a CPU model not yet recorded is compared with to float32 tolerance.

    # from a checkout of the commit before the change, with this file and the stored one beside it:
    PYTHONPATH=<that checkout>/src .venv/bin/python tests/acting_reference.py --add-cpu

adds the digest of this machine's CPU model (and rewrites nothing else). Make a new file only when a
change is *meant* to alter the N = 1 trajectory (the commit message must say why).
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs import FakeEnvironment
from dmpo.lifecycle.checkpoints import TrainingCheckpoints
from dmpo.replay.persistence import read_archive

REFERENCE_FILE = Path(__file__).parent / "data" / "acting_reference_n1.json"


def fake_factory(seed: int) -> FakeEnvironment:
    return FakeEnvironment(observation_shape=(3,), action_dim=2, episode_length=9, seed=seed % 10_000)


def reference_config(**overrides: Any) -> TrainConfig:
    agent = DMPOConfig(batch_size=8, samples_per_insert=4.0, min_replay_size=16, max_replay_size=400,
                       n_step=3,
                       learner=LearnerConfig(num_samples=3),
                       networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), vmin=-5.0,
                                              vmax=5.0, num_atoms=7))
    base = dict(env="test:fake", steps=240, seed=7, eval_every=0, checkpoint_every=100, keep_checkpoints=2,
                agent=agent)
    base.update(overrides)
    return TrainConfig(**base)


def _sha256(arrays: list[tuple[str, np.ndarray]]) -> str:
    digest = hashlib.sha256()
    for name, value in arrays:
        value = np.ascontiguousarray(value)
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def learner_template(config: TrainConfig) -> Any:
    from dmpo.agent.core import DMPO
    from dmpo.envs import make_environment_spec

    agent = DMPO(make_environment_spec(fake_factory(0)), config.agent, seed=0)
    try:
        return agent.learner.save_state()
    finally:
        agent.close()


def checkpoint_digest(checkpoint: Path, config: TrainConfig) -> dict[str, Any]:
    """The digest of one checkpoint folder (see the module docstring)."""
    learner_state, state, _ = TrainingCheckpoints.load(checkpoint, learner_template(config))
    raw = [(jax.tree_util.keystr(path), np.asarray(leaf))
           for path, leaf in jax.tree_util.tree_flatten_with_path(learner_state)[0]]
    header, arrays = read_archive(checkpoint / "replay.npz")
    replay = _sha256(sorted(arrays.items()))
    counts = {k: v for k, v in state["counts"].items() if "walltime" not in k}
    floats = {name: float(np.asarray(value, np.float64).ravel()[0]) for name, value in raw[:6]}
    return {"learner_sha256": _sha256(raw), "replay_sha256": replay, "replay_counters": header["counters"],
            "counts": counts, "num_actions": state["num_actions"], "episodes": state["episodes"],
            "env_steps": state["env_steps"], "first_values": floats}


def reference_run(directory: Path, **overrides: Any) -> dict[str, Any]:
    from dmpo.run.run import train

    config = reference_config(**overrides)
    train(config, directory, env_factory=fake_factory, progress=False, quiet=True)
    return checkpoint_digest(TrainingCheckpoints(directory / "checkpoints").latest(), config)


def learner_values(directory: Path, **overrides: Any) -> dict[str, list]:
    """Every leaf of the run's final learner state, as nested lists (floats and integers)."""
    config = reference_config(**overrides)
    checkpoint = TrainingCheckpoints(directory / "checkpoints").latest()
    learner_state, _, _ = TrainingCheckpoints.load(checkpoint, learner_template(config))
    return {jax.tree_util.keystr(path): np.asarray(leaf).tolist()
            for path, leaf in jax.tree_util.tree_flatten_with_path(learner_state)[0]}


def cpu_model() -> str:
    """The CPU's model name, plus " avx512" where it has AVX-512: XLA picks its kernels by the
    instruction set, and one model name ("AMD EPYC") covers machines with and without it, which round
    the same run differently."""
    with open("/proc/cpuinfo") as cpuinfo:
        lines = cpuinfo.read().splitlines()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return f"{name} avx512" if "avx512f" in flags else name


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        digest = reference_run(Path(tmp) / "run")
        values = learner_values(Path(tmp) / "run")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    if "--print" in sys.argv:
        print(json.dumps({"cpu": cpu_model(), "made_at_commit": commit, "digest": digest}, indent=2))
        return
    if "--add-cpu" not in sys.argv:
        sys.exit("usage: tests/acting_reference.py --print | --add-cpu (see the module docstring)")
    import dmpo

    code = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(dmpo.__file__).parent).stdout.strip()
    record = json.loads(REFERENCE_FILE.read_text())
    if code != record["made_at_commit"]:
        sys.exit(f"dmpo is imported from commit {code}; the stored digests were made at "
                 f"{record['made_at_commit']} (set PYTHONPATH to a checkout of it)")
    record["digests"][cpu_model()] = digest
    record.setdefault("values", values)
    record.setdefault("values_cpu", cpu_model())
    REFERENCE_FILE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"added {cpu_model()!r} to {REFERENCE_FILE}")


if __name__ == "__main__":
    main()
