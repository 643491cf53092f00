"""Callbacks: user code run at a training run's events, in both modes.

    class PrintBest(dmpo.lifecycle.callbacks.Callback):
        def on_evaluation(self, run, row):
            print(run.env_steps, row["return_mean"])
            if row["return_mean"] > 900:
                run.request_stop("good enough")

    dmpo.train(config, callbacks=[PrintBest()])

Each hook receives a `RunEvents` (the run directory, the config, the step counts of the row, and
`request_stop(reason)`) and the row just logged: an episode's row (`environment_loop` log), an
evaluation round's (`evaluator` log: `return_mean`, `return_std`, ..., and the counts), a checkpoint's
(`path`, `env_steps`, `learner_steps`) or, at the end, the run's summary. A hook that returns True
asks the run to stop as `request_stop` does. A stop ends the run after the current episode (single
process) or poll (distributed, where callbacks run in the driver), with the final checkpoint and
status "finished" plus the reason in run.json. Distributed runs call `on_evaluation` once per
evaluation round and `on_episode_end` not at all (episodes happen in the actor nodes).

Built in: `BestPolicy` (`snapshots/best.msgpack`) and `StopAtReturn` (`TrainConfig.stop_at_return`).
Both keep their state in run files (`snapshots/best.json`), so it survives `--resume`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dmpo.utils.files import atomic_write_text
from dmpo.utils.formats import BEST, read_header

BEST_POLICY_FILE = "best.msgpack"
BEST_RECORD_FILE = "best.json"


class RunEvents:
    """What a hook may read and ask of the run (one object for the whole run)."""

    def __init__(self, run_dir: str | Path, config: Any, *, resumed: bool = False,
                 write_policy: Callable[[Path], Path] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.config = config
        self.resumed = resumed
        self.env_steps = 0
        self.learner_steps = 0
        self.stop_reason: str | None = None
        self._write_policy = write_policy

    def request_stop(self, reason: str) -> None:
        """Ends the run at the next stopping point (the first reason given is kept)."""
        if self.stop_reason is None:
            self.stop_reason = str(reason) or "stopped by a callback"

    @property
    def stop_requested(self) -> bool:
        return self.stop_reason is not None

    def write_evaluated_policy(self, path: str | Path) -> Path:
        """Writes the policy of the evaluation being reported as a snapshot (only in `on_evaluation`)."""
        if self._write_policy is None:
            raise RuntimeError("write_evaluated_policy is only available inside on_evaluation")
        return self._write_policy(Path(path))


class Callback:
    """Base class: override the hooks you need; each may return True to ask the run to stop."""

    def on_train_start(self, run: RunEvents) -> bool | None:
        """Called once before training (also on resume: `run.resumed`)."""
        return None

    def on_episode_end(self, run: RunEvents, row: Mapping[str, Any]) -> bool | None:
        return None

    def on_evaluation(self, run: RunEvents, row: Mapping[str, Any]) -> bool | None:
        return None

    def on_checkpoint(self, run: RunEvents, row: Mapping[str, Any]) -> bool | None:
        return None

    def on_train_end(self, run: RunEvents, summary: Mapping[str, Any]) -> None:
        return None


class CallbackList:
    """Calls every callback's hook in order and turns a True answer into `request_stop`."""

    def __init__(self, run: RunEvents, callbacks: Iterable[Callback] = ()) -> None:
        self.run = run
        self.callbacks = list(callbacks)
        for callback in self.callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be dmpo.callbacks.Callback instances, got {callback!r}")

    def _call(self, hook: str, row: Mapping[str, Any] | None) -> bool:
        if row is not None:
            for key in ("actor_steps", "env_steps"):
                if key in row:
                    self.run.env_steps = int(row[key])
                    break
            if "learner_steps" in row:
                self.run.learner_steps = int(row["learner_steps"])
        for callback in self.callbacks:
            method = getattr(callback, hook)
            answer = method(self.run) if row is None else method(self.run, row)
            if answer is True:
                self.run.request_stop(f"{type(callback).__name__}.{hook} asked to stop")
        return self.run.stop_requested

    def on_train_start(self) -> bool:
        return self._call("on_train_start", None)

    def on_episode_end(self, row: Mapping[str, Any]) -> bool:
        return self._call("on_episode_end", row)

    def on_evaluation(self, row: Mapping[str, Any],
                      write_policy: Callable[[Path], Path] | None = None) -> bool:
        self.run._write_policy = write_policy
        try:
            return self._call("on_evaluation", row)
        finally:
            self.run._write_policy = None

    def on_checkpoint(self, row: Mapping[str, Any]) -> bool:
        return self._call("on_checkpoint", row)

    def on_train_end(self, summary: Mapping[str, Any]) -> None:
        for callback in self.callbacks:
            callback.on_train_end(self.run, summary)


def read_best(run_dir: str | Path) -> dict[str, Any] | None:
    """`snapshots/best.json` of a run (the best evaluation so far), or None."""
    path = Path(run_dir) / "snapshots" / BEST_RECORD_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    read_header(record, BEST, str(path))
    return record


class BestPolicy(Callback):
    """Keeps `snapshots/best.msgpack`: the policy of the best evaluation so far (by `return_mean`),
    with `snapshots/best.json` naming its return and steps. Both files are written atomically, the
    snapshot first, so `best.json` never names a return the snapshot does not have. On resume the
    record is read back, so a resumed run never replaces the best with a worse one."""

    def __init__(self, key: str = "return_mean") -> None:
        self.key = key
        self.best: float | None = None

    def on_train_start(self, run: RunEvents) -> None:
        record = read_best(run.run_dir)
        if record is not None:
            self.best = float(record[self.key])

    def on_evaluation(self, run: RunEvents, row: Mapping[str, Any]) -> None:
        value = float(row[self.key])
        if math.isnan(value) or (self.best is not None and value <= self.best):
            return
        snapshots = run.run_dir / "snapshots"
        run.write_evaluated_policy(snapshots / BEST_POLICY_FILE)
        record = {**BEST.header(), self.key: value, "actor_steps": run.env_steps,
                  "learner_steps": run.learner_steps}
        atomic_write_text(snapshots / BEST_RECORD_FILE, json.dumps(record, indent=2) + "\n")
        self.best = value


class StopAtReturn(Callback):
    """Stops the run after the first evaluation whose `return_mean` is at or above `threshold`.

    A resumed run whose best evaluation so far (`snapshots/best.json`) already reached the
    threshold stops again at once; raise `stop_at_return` on resume to train on."""

    def __init__(self, threshold: float) -> None:
        self.threshold = float(threshold)

    def _reason(self, value: float, steps: int) -> str:
        return f"evaluation return {value:.1f} >= stop_at_return {self.threshold:g} at {steps} env steps"

    def on_train_start(self, run: RunEvents) -> None:
        record = read_best(run.run_dir)
        if run.resumed and record is not None and float(record["return_mean"]) >= self.threshold:
            run.request_stop(self._reason(float(record["return_mean"]), int(record["actor_steps"])))

    def on_evaluation(self, run: RunEvents, row: Mapping[str, Any]) -> None:
        value = float(row["return_mean"])
        if value >= self.threshold:
            run.request_stop(self._reason(value, run.env_steps))


def default_callbacks(config: Any, callbacks: Iterable[Callback] = ()) -> list[Callback]:
    """The built-ins a `TrainConfig` asks for (best policy whenever the run evaluates, stop at a
    return when `stop_at_return` is set), before the user's own."""
    built_in: list[Callback] = []
    if config.eval_every:
        built_in.append(BestPolicy())
    if getattr(config, "stop_at_return", None) is not None:
        built_in.append(StopAtReturn(config.stop_at_return))
    return [*built_in, *callbacks]


__all__ = ["BestPolicy", "Callback", "CallbackList", "RunEvents", "StopAtReturn", "default_callbacks",
           "read_best"]
