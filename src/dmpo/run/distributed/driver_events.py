"""The driver's side of callbacks and experiment trackers in the distributed program
(`dmpo.lifecycle.callbacks`,
`dmpo.reporting.trackers`).

Episodes, evaluations and checkpoints happen in the nodes; the driver learns of them in its
monitoring passes, and this is where the user's callbacks run:

* `on_evaluation` once per evaluation round, with the row the evaluator logged (the local trainer's
  columns: `return_mean`, `return_std`, ..., and every count), handed on by the program's one
  evaluation point (`DistributedProgram._on_evaluation`). The parameters the round scored stay in
  the evaluator for a few rounds, so the best-policy callback can write them.
* `on_checkpoint` once a checkpoint is written at a boundary or one the driver asked for (the
  learner's final one at `stop()` is not reported);
* `on_train_start` and `on_train_end` are the `Run`'s (`dmpo.run.run`), as in one process;
  `on_episode_end` is not called: episodes happen in the actor nodes.

A tracker gets the rows the nodes write to their CSV logs (`CSVFollower`), so credentials stay in
the driver's process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from dmpo.lifecycle.callbacks import CallbackList
from dmpo.run.distributed.common import get_quietly


class DriverEvents:
    """Callbacks and the tracker of one distributed run (module docstring)."""

    def __init__(self, run_dir: Path, config: Any, *, callbacks: CallbackList,
                 snapshot_metadata: Callable[..., dict[str, Any]],
                 checkpointed: Callable[[int], None] = lambda steps: None) -> None:
        self.config = config
        self.run_dir = run_dir
        self.callbacks = callbacks  # the Run's
        self.snapshot_metadata = snapshot_metadata  # the Run's: what every snapshot records
        self._checkpointed = checkpointed  # tells the Run's schedule
        self.last_evaluation: dict[str, Any] | None = None
        self._reported_save: Any = None
        self._tracker: Any = None
        self._follower: Any = None
        self._videos_sent: set[str] = set()

    @property
    def stop_requested(self) -> bool:
        return self.callbacks.run.stop_requested

    @property
    def stop_reason(self) -> str | None:
        return self.callbacks.run.stop_reason

    def start(self, run: Any) -> None:
        """Opens the tracker (continuing the run id in run.json)."""
        from dmpo.reporting.trackers import CSVFollower, open_tracker

        self._tracker = open_tracker(self.config, run)
        self._follower = CSVFollower(self.run_dir) if self._tracker is not None else None
        self._videos_sent = {path.name for path in (self.run_dir / "videos").glob("step_*.mp4")}  # resumed

    def poll(self, save_ref: Any) -> None:
        """One monitoring pass: a written checkpoint, new log rows for the tracker."""
        self._check_saved(save_ref)
        self._forward_rows()

    def on_evaluation(self, evaluator: Any, index: int, row: dict[str, Any]) -> None:
        """Round `index` of the current evaluator node logged `row`: the callbacks' `on_evaluation`."""
        self.last_evaluation = row
        write = functools.partial(self._write_round_policy, evaluator, index, int(row.get("actor_steps", 0)))
        self.callbacks.on_evaluation(row, write_policy=write)

    def _write_round_policy(self, evaluator: Any, index: int, actor_steps: int, path: Path) -> Path:
        metadata = self.snapshot_metadata(actor_steps=actor_steps)
        written = ray.get(evaluator.save_round_policy.remote(index, str(path), metadata))
        if written is None:
            raise RuntimeError(f"evaluation round {index}'s parameters are no longer kept")
        return Path(written)

    def _check_saved(self, save_ref: Any) -> None:
        if save_ref is None or self._reported_save is save_ref:
            return
        ready, _ = ray.wait([save_ref], timeout=0)
        if ready:
            self._report_checkpoint(save_ref, get_quietly(save_ref, 1.0))

    def _report_checkpoint(self, save_ref: Any, path: str | None) -> None:
        self._reported_save = save_ref
        self.checkpoint_written(path)

    def checkpoint_written(self, path: str | None) -> None:
        """The learner wrote the checkpoint `path` (None: it had nothing to write): `on_checkpoint`."""
        if path is None:
            return
        from dmpo.lifecycle.checkpoints import read_state
        from dmpo.utils.checkpointing import CheckpointError

        try:
            state = read_state(path)
        except (FileNotFoundError, CheckpointError):  # retention removed it already: newer ones since
            if Path(path).exists():
                raise
            return
        self._checkpointed(state.env_steps)
        self.callbacks.on_checkpoint({"path": path, "env_steps": state.env_steps,
                                      "learner_steps": state.learner_steps})

    def _forward_rows(self) -> None:
        if self._follower is not None:
            for label, row in self._follower.new_rows():
                self._tracker.log_row(label, row)
            self._forward_videos()

    def _forward_videos(self) -> None:
        """Videos the evaluator node filmed (`videos/step_<N>.mp4`, which appear only once complete)."""
        for path in sorted((self.run_dir / "videos").glob("step_*.mp4")):
            if path.name not in self._videos_sent:
                self._videos_sent.add(path.name)
                self._tracker.log_video(path, "evaluator", int(path.stem.partition("_")[2]))

    def finish(self, status: str, save_ref: Any, saved: str | None) -> None:
        """After the evaluations ended: the last checkpoint asked for (a finished run), the last rows."""
        if status == "finished":
            if save_ref is not None and self._reported_save is not save_ref:
                self._report_checkpoint(save_ref, saved)
        self._forward_rows()
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None
