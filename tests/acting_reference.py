"""The stored reference run that proves `num_envs = 1` trains bit-identically to the code before
vectorized acting (issue 23).

`reference_run(directory)` trains a tiny synchronous-learner run on `FakeEnvironment` (episodes of 9
steps, so checkpoint boundaries fall inside episodes and the environment is re-created per segment)
and returns a digest of its final checkpoint: sha256 of the learner state's leaves (params,
optimizer state, step, key), sha256 of the replay contents, the counters, the actor's action count,
and a few float values to show how far apart two runs are when the hashes differ.

    .venv/bin/python tests/acting_reference.py   # rewrites tests/data/acting_reference_n1.json

The stored file names the commit it was made at. Rewrite it only when a change is *meant* to alter
the N = 1 trajectory (the commit message must say why). XLA on another CPU family may round
differently; the file records the CPU it was made on.
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
from dmpo.replay.persistence import read_archive
from dmpo.runners.checkpoints import TrainingCheckpoints

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
    from dmpo.agent import DMPO
    from dmpo.types import make_environment_spec

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
    from dmpo.runners.local import train

    config = reference_config(**overrides)
    train(config, directory, env_factory=fake_factory, progress=False, quiet=True)
    return checkpoint_digest(TrainingCheckpoints(directory / "checkpoints").latest(), config)


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        digest = reference_run(Path(tmp) / "run")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    with open("/proc/cpuinfo") as cpuinfo:
        cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
                   platform.processor())
    record = {"made_at_commit": commit, "cpu": cpu, "jax": jax.__version__, "digest": digest}
    if "--print" in sys.argv:
        print(json.dumps(record, indent=2, sort_keys=True))
        return
    REFERENCE_FILE.parent.mkdir(exist_ok=True)
    REFERENCE_FILE.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE_FILE}")


if __name__ == "__main__":
    main()
