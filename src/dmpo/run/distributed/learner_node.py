"""The learner node: the builder's learner fed by the replay node, serving variables (algorithm.md §7.2).

`run()` is the shared `SteppingLoop`: take the next prefetched batch outside the state lock, then
one update under it. Waiting for data must never block variable requests, or a starting actor
waiting for its first weights and a learner waiting for that actor's data would wait for each
other. The update donates the old state's buffers, so `get_variables()` reads the state under the
same lock; it is called once per actor every `variable_update_period` steps, so the lock costs
nothing measurable.

Checkpoints go to `<run_dir>/checkpoints` in the single-process layout (`dmpo.lifecycle.checkpoints`,
state.json = `dmpo.lifecycle.checkpoints.CheckpointState`, replay contents when `save_replay`).
The driver asks
for them (`save()`) at `checkpoint_every` environment-step boundaries; one more is written when
`run()` ends. `DMPOConfig.checkpoint=False` writes none. `resume=True` restores the learner state
and the shared counts from the latest one (the replay node restores the table itself).

The policy snapshot (`<run_dir>/snapshots/policy.msgpack`, `dmpo.agent.policies.snapshot.save_policy`, written
atomically) is also written here, from the learner's target policy, when the driver asks
(`save_snapshot`: after every evaluation round and at the end), with the local trainer's metadata.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ray

from dmpo.lifecycle.checkpoints import CheckpointState
from dmpo.run.distributed.common import NODE_OPTIONS, NodeSettings, make_node_logger
from dmpo.run.distributed.counter_service import make_child_counter
from dmpo.run.distributed.replay_client import RemoteTableSampler, TimedBatches
from dmpo.run.distributed.variables import VariablePublisher


class _RemoteTable:
    """`save(path)` forwarded to the replay node (it writes the file; same file system assumed)."""

    def __init__(self, replay: Any) -> None:
        self._replay = replay

    def save(self, path: Any) -> None:
        ray.get(self._replay.save.remote(str(path)))


class LearnerNode:
    """See the module docstring. `replay_restored`: the replay node loaded the checkpoint's table."""

    def __init__(self, settings: NodeSettings, seed: int, replay: Any, counter_service: Any, *,
                 keep_checkpoints: int = 2, save_replay: bool = True, resume: bool = False,
                 replay_restored: bool = False, samples_in_flight: int = 2,
                 publish_interval: float = 0.0) -> None:
        from dmpo.agent.learning import BatchSlot
        from dmpo.agent.learning.stepping import SteppingLoop

        builder = settings.builder
        self._settings = settings
        self._counter_service = counter_service
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        dataset = builder.make_dataset(RemoteTableSampler(replay), prefetch=True,
                                       num_workers=samples_in_flight, poll_interval=0.5)
        self._batches = TimedBatches(dataset)
        handoff = BatchSlot()
        self._counter = make_child_counter(counter_service, "learner", settings.counter_time_delta)
        self._logger = make_node_logger("learner", settings.run_dir, time_delta=settings.log_time_delta)
        self._learner = builder.make_learner(handoff, seed=seed, logger=self._logger, counter=self._counter)
        self._loop = SteppingLoop(self._learner, self._batches, handoff, lock=self._lock, stop=self._stop)
        self._replay = replay
        self._save_replay = save_replay
        self._checkpoints = None
        if settings.config.checkpoint:
            from dmpo.lifecycle.checkpoints import TrainingCheckpoints

            self._checkpoints = TrainingCheckpoints(settings.checkpoint_dir, keep=keep_checkpoints)
        self._min_replay_size = settings.config.min_replay_size
        self._learning_starts = self._min_replay_size
        self.evaluations = 0
        self.resumed_from: int | None = None
        if resume:
            self._restore(replay_restored)
        self._publisher = VariablePublisher(self._read_variables, lambda: self.steps,
                                            min_interval=publish_interval)
        self._run_started: float | None = None
        self._run_seconds = 0.0

    @property
    def steps(self) -> int:
        return self._loop.steps

    # ------------------------------------------------------------------------------------ run loop

    def run(self, max_steps: int | None = None) -> dict[str, Any]:
        """Steps until `stop()` or until the learner step count reaches `max_steps`; returns `stats()`."""
        self._run_started = time.monotonic()
        try:
            self._loop.run(max_steps)
        finally:
            self._run_seconds += time.monotonic() - self._run_started
            self._run_started = None
            self._batches.close()
            self.save()
            self._logger.close()
        return self.stats()

    def stop(self, evaluations: int | None = None) -> None:
        """Ends `run()` after the current step (a wait for data is interrupted)."""
        if evaluations is not None:
            self.evaluations = evaluations
        self._stop.set()
        self._batches.close()

    # ------------------------------------------------------------------------------------ variables

    def get_variables(self) -> tuple[int, list[Any]]:
        """`(learner step, [ref to the target (observation, policy) params])` (algorithm.md §6.6)."""
        return self._publisher.get()

    def _read_variables(self) -> Any:
        import jax

        with self._lock:  # a device copy under the lock; the host transfer waits outside it
            params = self._learner.policy_params_on_device()
        return jax.device_get(params)

    # ---------------------------------------------------------------------------------- checkpoints

    def save(self, evaluations: int | None = None, before_steps: int | None = None) -> str | None:
        """Writes a checkpoint now (none when the config turns checkpoints off); returns its folder.
        `before_steps` (a periodic checkpoint): none once the run's environment steps reach it, because
        the final checkpoint follows (`dmpo.lifecycle.schedule`)."""
        if self._checkpoints is None:
            return None
        if evaluations is not None:
            self.evaluations = evaluations
        with self._save_lock:
            with self._lock:
                learner_state = self._learner.save_state()
                steps = self.steps
            counts = self._counter.sync()
            counts["learner_steps"] = steps  # exact, whatever the push timing
            env_steps = int(counts.get("actor_steps", 0))
            if before_steps is not None and env_steps >= before_steps:
                return None
            state = CheckpointState(
                env_steps=env_steps, learner_steps=steps, counts=counts, num_observations=env_steps,
                learning_starts=self._learning_starts, episodes=int(counts.get("actor_episodes", 0)),
                evaluations=self.evaluations, distributed=True, wall_seconds=self._settings.wall_seconds())
            table = _RemoteTable(self._replay) if self._save_replay else None
            return str(self._checkpoints.save(env_steps, learner_state, state.to_json(), table))

    def _restore(self, replay_restored: bool) -> None:
        from dmpo.lifecycle.checkpoints import TrainingCheckpoints

        latest = None if self._checkpoints is None else self._checkpoints.latest()
        if latest is None:
            raise FileNotFoundError("cannot resume: no learner checkpoint in the run directory")
        learner_state, saved, _ = TrainingCheckpoints.load(latest, self._learner.save_state())
        state = CheckpointState.from_json(saved, where=str(latest / "state.json"))
        self._learner.restore_state(learner_state)
        self._loop.steps = state.learner_steps
        self.resumed_from = state.learner_steps
        self.evaluations = state.evaluations
        # Without the replay contents the ratio limiter's min_size holds sampling back on the empty table.
        self._learning_starts = (state.learning_starts if replay_restored
                                 else state.env_steps + self._min_replay_size)
        counts = dict(state.counts)
        counts["learner_steps"] = state.learner_steps
        ray.get(self._counter_service.restore.remote(counts))

    def save_snapshot(self, metadata: dict[str, Any]) -> str:
        """Writes the policy snapshot of the current target policy; `metadata` is the run's (env, pixels,
        action_repeat); the step counts are added here. Returns the file's path."""
        from pathlib import Path

        from dmpo.agent.policies.snapshot import save_policy

        with self._lock:
            params = self._learner.policy_params()
            steps = self.steps
        counts = self._counter.get_counts()
        builder = self._settings.builder
        path = Path(self._settings.run_dir) / "snapshots" / "policy.msgpack"
        return str(save_policy(path, builder.environment_spec, builder.config.networks, params,
                               metadata={**metadata, "actor_steps": int(counts.get("actor_steps", 0)),
                                         "learner_steps": steps}))

    def learner_state(self) -> Any:
        """A host copy of the whole training state (params, optimiser states, duals, step, key)."""
        with self._lock:
            return self._learner.save_state()

    def describe(self) -> dict[str, Any]:
        """What this node built (parity tests): its learner's config and batches per step."""
        return {"learner_config": self._learner.config, "batches_per_step": self._learner.batches_per_step,
                "agent_config": self._settings.config, "logger": type(self._logger).__name__}

    # ---------------------------------------------------------------------------------------- stats

    def stats(self) -> dict[str, Any]:
        running = self._run_seconds
        if self._run_started is not None:
            running += time.monotonic() - self._run_started
        return {
            "steps": self.steps,
            "resumed_from": self.resumed_from,
            "run_seconds": running,
            "data_wait_seconds": self._batches.wait_seconds,
            "data_wait_fraction": min(1.0, self._batches.wait_seconds / max(running, 1e-9)),
            "metric_fetches": self._learner.metric_fetches,
        }

    def ping(self) -> int:
        return self.steps


def make_learner_node(settings: NodeSettings, seed: int, replay: Any, counter_service: Any, *,
                      use_gpu: bool, resources: dict[str, float] | None = None, **kwargs: Any) -> Any:
    """Starts the learner as a Ray actor, on a GPU when `use_gpu` (Ray then sets CUDA_VISIBLE_DEVICES),
    on a node with `resources` (custom Ray resources) when given."""
    cls = ray.remote(num_cpus=0, num_gpus=1 if use_gpu else 0, max_concurrency=4, max_restarts=0,
                     **NODE_OPTIONS)(LearnerNode)
    return cls.options(resources=resources or {}).remote(settings, seed, replay, counter_service, **kwargs)
