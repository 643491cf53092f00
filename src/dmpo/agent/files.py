"""`DMPO.save(path)` / `DMPO.load(path)`: a single-process agent written to a folder and read back.

    <path>/
        agent.json        file header (`dmpo.agent`), seed, num_envs, environment spec, the agent's and
                          the actor's counts
        config.json       the DMPOConfig (dmpo.config.files.save_config)
        learner/          the whole TrainingState in one checkpoint file (dmpo.utils.checkpointing:
                          checksummed, no pickle)
        replay.npz        replay contents and sampler state (only with replay=True)

A loaded agent continues exactly where the saved one stood: the same next action (the actor's
randomness is `fold_in(seed key, action count)`) and, with the replay saved, the same next update.
Save between episodes: the n-step adder's pending steps of an unfinished episode are not kept. Custom
networks (`DMPO(networks=...)`) are not saved; pass the same ones to `load`. The folder is written
under a temporary name and renamed into place when complete, and an existing folder is never replaced.
The training runs of `dmpo train` keep their own checkpoints (`dmpo.lifecycle.checkpoints`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmpo.agent.policies.snapshot import environment_spec_from_dict, environment_spec_to_dict
from dmpo.config import DMPOConfig
from dmpo.config.files import load_config, save_config
from dmpo.utils.checkpointing import (
    CheckpointError,
    checkpoint_file_name,
    find_checkpoint_file,
    read_checkpoint,
    write_checkpoint_file,
)
from dmpo.utils.files import atomic_directory, atomic_write_text
from dmpo.utils.formats import AGENT, read_header

if TYPE_CHECKING:
    from dmpo.agent.core import DMPO
    from dmpo.agent.networks import DMPONetworks

__all__ = ["load_agent", "save_agent"]


def save_agent(agent: DMPO, path: str | os.PathLike[str], *, replay: bool = False) -> Path:
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; DMPO.save writes a new folder and never replaces one")
    with atomic_directory(path) as temp:
        with agent.pause():
            learner_state = agent.learner.save_state()
            if replay:
                agent.table.save(temp / "replay.npz")
            record = {
                **AGENT.header(), "seed": agent.seed, "overlap_learner": agent.overlap_learner,
                "num_envs": len(agent.adders),
                "environment_spec": environment_spec_to_dict(agent.builder.environment_spec),
                "num_observations": agent.num_observations, "learning_starts": agent.learning_starts,
                "pending_sgd_steps": agent.pending_sgd_steps, "num_actions": agent.actor.num_actions,
                "replay": replay,
            }
        (temp / "learner").mkdir()
        steps = int(learner_state.steps)
        write_checkpoint_file(temp / "learner" / checkpoint_file_name(steps), learner_state, step=steps)
        save_config(temp / "config.json", agent.config)
        atomic_write_text(temp / "agent.json", json.dumps(record, indent=2) + "\n")
    return path


def load_agent(agent_class: type[DMPO], path: str | os.PathLike[str], *, networks: DMPONetworks | None = None,
               logger: Any = None, counter: Any = None) -> DMPO:
    # The class comes from `DMPO.load`: this module never imports the agent, so the two form no circle.
    path = Path(path)
    record_file = path / "agent.json"
    if not record_file.is_file():
        raise FileNotFoundError(f"{path} is not a saved agent (no agent.json); save one with DMPO.save(path)")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    version = read_header(record, AGENT, str(record_file))
    config = load_config(path / "config.json", DMPOConfig)
    agent = agent_class(environment_spec_from_dict(record["environment_spec"]), config, networks=networks,
                 seed=record["seed"], logger=logger, counter=counter,
                 overlap_learner=record["overlap_learner"],
                 num_envs=1 if version == 1 else record["num_envs"])  # version 1 acted in one environment
    learner_file = find_checkpoint_file(path / "learner")
    if learner_file is None:
        raise CheckpointError(f"{path}: no learner checkpoint file in {path / 'learner'}")
    state, _ = read_checkpoint(learner_file, agent.learner.save_state())
    agent.learner.restore_state(state)
    agent.num_observations = record["num_observations"]
    agent.learning_starts = record["learning_starts"]
    agent.pending_sgd_steps = record["pending_sgd_steps"]
    if record["replay"]:
        agent.table.load(path / "replay.npz")
    else:
        agent.restart_learning()  # an empty table: learn again after min_observations new steps
    agent.actor.num_actions = record["num_actions"]
    agent.actor.update(wait=True)
    return agent
