"""The learner node: `dmpo.learning.Learner` fed by the replay node, serving variables (spec §7.2).

`run()` loops: take the next prefetched batch (outside any lock — waiting for data must never block
variable requests, or a starting actor waiting for its first weights and a learner waiting for that
actor's data would wait for each other), then one update under the state lock. The update donates
the old state's buffers, so `get_variables()` reads the state under the same lock; it is called once
per actor every `variable_update_period` steps, so the lock costs nothing measurable.

Checkpoints go to `<run_dir>/checkpoints` in the single-process runner's layout
(`dmpo.runners.checkpoints`: one folder per checkpoint, named by environment steps, holding the
learner state, the counter totals in state.json and optionally the replay contents) every
`checkpoint_period_seconds` and once more when `run()` ends; `resume=True` restores the latest one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ray

from dmpo.distributed.common import NodeSettings, make_networks, make_node_logger
from dmpo.distributed.counter_service import make_child_counter
from dmpo.distributed.replay_client import RemoteSampleStream, StreamClosed
from dmpo.distributed.variables import VariablePublisher


class _RemoteTable:
    """`save(path)` forwarded to the replay node (it writes the file; same file system assumed)."""

    def __init__(self, replay: Any) -> None:
        self._replay = replay

    def save(self, path: Any) -> None:
        ray.get(self._replay.save.remote(str(path)))


class LearnerNode:
    """See the module docstring."""

    def __init__(self, settings: NodeSettings, seed: int, replay: Any, counter_service: Any, *,
                 checkpoint_period_seconds: float = 600.0, keep_checkpoints: int = 2,
                 checkpoint_replay: bool = False, resume: bool = False, samples_in_flight: int = 2,
                 publish_interval: float = 0.0) -> None:
        from dmpo.learning import BatchSlot, Learner

        config = settings.config
        self._counter_service = counter_service
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stream = RemoteSampleStream(replay, config.batch_size, num_in_flight=samples_in_flight,
                                          prefetch_size=config.prefetch_size)
        self._handoff = BatchSlot()
        self._counter = make_child_counter(counter_service, "learner", settings.counter_time_delta)
        self._logger = make_node_logger("learner", settings.run_dir, time_delta=settings.log_time_delta)
        self._learner = Learner(make_networks(settings), settings.env_spec, config.learner, self._handoff,
                                seed=seed, logger=self._logger, counter=self._counter)
        self._replay = replay
        self._checkpoint_replay = checkpoint_replay
        self._checkpoints = None
        if config.checkpoint:
            from dmpo.runners.checkpoints import TrainingCheckpoints

            self._checkpoints = TrainingCheckpoints(settings.checkpoint_dir, keep=keep_checkpoints)
        self._checkpoint_period = float(checkpoint_period_seconds)
        self._last_save = time.monotonic()
        self.steps = 0
        self.resumed_from: int | None = None
        if resume:
            self._restore()
        self._publisher = VariablePublisher(self._read_variables, lambda: self.steps,
                                            min_interval=publish_interval)
        self._run_started: float | None = None
        self._run_seconds = 0.0

    # ------------------------------------------------------------------------------------ run loop

    def run(self, max_steps: int | None = None) -> dict[str, Any]:
        """Steps until `stop()` or until the learner step count reaches `max_steps`; returns `stats()`."""
        self._run_started = time.monotonic()
        try:
            while not self._stop.is_set() and (max_steps is None or self.steps < max_steps):
                try:
                    batches = [next(self._stream) for _ in range(self._learner.batches_per_step)]
                except StreamClosed:
                    break
                with self._lock:
                    for batch in batches:
                        self._handoff.put(batch)
                    self._learner.step()
                    self.steps += self._learner.batches_per_step
                if time.monotonic() - self._last_save >= self._checkpoint_period:
                    self.save()
        finally:
            self._run_seconds += time.monotonic() - self._run_started
            self._run_started = None
            self._stream.close()
            self.save()
            self._logger.close()
        return self.stats()

    def stop(self) -> None:
        """Ends `run()` after the current step (a wait for data is interrupted)."""
        self._stop.set()
        self._stream.close()

    # ------------------------------------------------------------------------------------ variables

    def get_variables(self) -> tuple[int, list[Any]]:
        """`(learner step, [ref to the target (observation, policy) params])` (spec §6.6)."""
        return self._publisher.get()

    def _read_variables(self) -> Any:
        import jax

        with self._lock:  # a device copy under the lock; the host transfer waits outside it
            params = self._learner.policy_params_on_device()
        return jax.device_get(params)

    # ---------------------------------------------------------------------------------- checkpoints

    def save(self) -> str | None:
        """Writes a checkpoint now (no-op when the config turns checkpoints off); returns its folder."""
        if self._checkpoints is None:
            return None
        with self._lock:
            state = self._learner.save_state()
            steps = self.steps
        counts = self._counter.sync()
        counts["learner_steps"] = steps  # exact, whatever the push timing
        env_steps = int(counts.get("actor_steps", 0))
        info = {"env_steps": env_steps, "learner_steps": steps, "counts": counts, "distributed": True}
        table = _RemoteTable(self._replay) if self._checkpoint_replay else None
        path = self._checkpoints.save(env_steps, state, info, table)
        self._last_save = time.monotonic()
        return str(path)

    def _restore(self) -> None:
        from dmpo.runners.checkpoints import TrainingCheckpoints

        latest = None if self._checkpoints is None else self._checkpoints.latest()
        if latest is None:
            raise FileNotFoundError("cannot resume: no learner checkpoint in the run directory")
        state, info, _ = TrainingCheckpoints.load(latest, self._learner.save_state())
        self._learner.restore_state(state)
        self.steps = int(info["learner_steps"])
        self.resumed_from = self.steps
        counts = dict(info.get("counts", {}))
        counts["learner_steps"] = self.steps
        ray.get(self._counter_service.restore.remote(counts))

    # ---------------------------------------------------------------------------------------- stats

    def stats(self) -> dict[str, Any]:
        running = self._run_seconds
        if self._run_started is not None:
            running += time.monotonic() - self._run_started
        return {
            "steps": self.steps,
            "resumed_from": self.resumed_from,
            "run_seconds": running,
            "data_wait_seconds": self._stream.wait_seconds,
            "data_wait_fraction": min(1.0, self._stream.wait_seconds / max(running, 1e-9)),
        }

    def ping(self) -> int:
        return self.steps


def make_learner_node(settings: NodeSettings, seed: int, replay: Any, counter_service: Any, *,
                      use_gpu: bool, **kwargs: Any) -> Any:
    """Starts the learner as a Ray actor, on a GPU when `use_gpu` (Ray then sets CUDA_VISIBLE_DEVICES)."""
    cls = ray.remote(num_cpus=0, num_gpus=1 if use_gpu else 0, max_concurrency=4, max_restarts=0)(LearnerNode)
    return cls.remote(settings, seed, replay, counter_service, **kwargs)
