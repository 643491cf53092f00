"""What `--resume` may do, decided once for the CLI, `dmpo.train` and `run_distributed` alike.

`plan_resume(run_dir, config)` reads the run directory and returns a `ResumePlan`, or raises
`ResumeError` with one line saying why the run cannot continue with `config`:

- the folder must be a run directory (config.json and run.json) and the config must keep writing
  checkpoints (`DMPOConfig.checkpoint`);
- only `RESUMABLE_FIELDS` may differ from the saved config (a longer budget, other periods, more
  actors); every other field shaped the checkpoint (networks, task, agent) and is refused, by name;
- the number of actors may change, but not between 0 (one process) and N (distributed), nor may a
  checkpoint written by one mode be resumed by the other;
- the newest usable checkpoint is verified before anything is built. A run stopped before its first
  checkpoint has none: it starts again from step 0 in the same folder with its saved config, so that a
  run interrupted or failed early is never a dead end.

A plan whose checkpoint already reached the budget has `nothing_to_do` when the run ended `finished`.
One that reached it but ended otherwise (a signal during its final checkpoint or evaluation, a kill,
an error in its final events) is `only_final_events`: the resume trains no step, writes the final
events that are missing and marks the run `finished`. `apply_resume(plan)` records the changed
settings in config.json and run.json before training starts.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

from dmpo.config import AUTO_SUPPORT, ConfigError, TrainConfig
from dmpo.lifecycle.directory import RunDirectory

__all__ = ["RESUMABLE_FIELDS", "NoRunError", "ResumeError", "ResumePlan", "apply_resume",
           "config_differences", "plan_resume"]

# Settings that may differ on resume; any other difference would not match the checkpoint.
RESUMABLE_FIELDS = ("steps", "eval_every", "eval_episodes", "checkpoint_every", "keep_checkpoints", "actors",
                    "stop_at_return", "video_every")


class ResumeError(ConfigError):
    """The run cannot be resumed as asked; the message is one line naming the run and the reason."""


class NoRunError(ResumeError, FileNotFoundError):
    """The folder to resume is missing or holds no run (no config.json / run.json)."""


@dataclasses.dataclass(frozen=True)
class ResumePlan:
    """How a run continues.

    Attributes:
      run_dir: the run directory.
      config: the config to train with (the saved one with the allowed changes).
      changes: `{dotted field: (saved, given)}` of the allowed changes.
      checkpoint: the checkpoint folder to restore; None: start again from step 0.
      reached: environment steps of that checkpoint (0 without one).
      warnings: checkpoints skipped as unusable, one line each.
      status: the run's status in run.json when the resume began.
    """

    run_dir: Path
    config: TrainConfig
    changes: dict[str, tuple[Any, Any]]
    checkpoint: Path | None
    reached: int
    warnings: tuple[str, ...] = ()
    status: str = "finished"

    @property
    def budget_reached(self) -> bool:
        return self.checkpoint is not None and self.reached >= self.config.steps

    @property
    def nothing_to_do(self) -> bool:
        """The checkpoint holds the budget and the run finished: the resume changes nothing."""
        return self.budget_reached and self.status == "finished"

    @property
    def only_final_events(self) -> bool:
        """The checkpoint holds the budget but the run did not finish: only its final events remain."""
        return self.budget_reached and self.status != "finished"

    @property
    def from_scratch(self) -> bool:
        """No checkpoint: the run starts again at step 0 with its saved config."""
        return self.checkpoint is None


def config_differences(saved: object, given: object, prefix: str = "") -> dict[str, tuple[object, object]]:
    """`{dotted field: (saved, given)}` for every leaf field that differs between two configs. A given
    "auto" or "auto-gym" critic support matches the value the saved run resolved it to."""
    if dataclasses.is_dataclass(saved) and type(saved) is type(given):
        found: dict[str, tuple[object, object]] = {}
        for field in dataclasses.fields(saved):
            found.update(config_differences(getattr(saved, field.name), getattr(given, field.name),
                                            f"{prefix}{field.name}."))
        return found
    if saved == given or (given in AUTO_SUPPORT and prefix.rstrip(".").endswith(("vmin", "vmax"))):
        return {}
    return {prefix.rstrip("."): (saved, given)}


def _saved_config(run_dir: Path) -> TrainConfig:
    from dmpo.lifecycle.directory import RunDirectory

    try:
        return RunDirectory.open(run_dir).load_config(TrainConfig)
    except FileNotFoundError as error:
        raise NoRunError(f"cannot resume {run_dir}: {error}") from error
    except (ConfigError, ValueError) as error:
        raise ResumeError(f"cannot resume {run_dir}: its config.json cannot be read: {error}") from error


def _latest_checkpoint(run_dir: Path) -> tuple[Path | None, dict[str, Any] | None, tuple[str, ...]]:
    from dmpo.lifecycle.checkpoints import TrainingCheckpoints, verify
    from dmpo.utils.checkpointing import CheckpointError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            latest = TrainingCheckpoints(run_dir / "checkpoints").latest()
            state = verify(latest) if latest is not None else None
        except CheckpointError as error:
            raise ResumeError(f"cannot resume {run_dir}: {error}") from error
    return latest, state, tuple(str(warning.message) for warning in caught)


def plan_resume(run_dir: str | Path, config: TrainConfig | None = None) -> ResumePlan:
    """The plan to continue `run_dir` with `config` (None: its saved config); see the module docstring."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NoRunError(f"cannot resume {run_dir}: no such run directory")
    saved = _saved_config(run_dir)
    given = saved if config is None else config.resolved()
    if not given.agent.checkpoint:
        raise ResumeError(f"cannot resume {run_dir}: DMPOConfig.checkpoint is False, so this run writes no "
                          "checkpoints")
    changes = config_differences(saved, given)
    if "actors" in changes and 0 in changes["actors"]:
        raise ResumeError(f"cannot resume {run_dir}: the number of actors (--actors) cannot switch between "
                          f"single-process (0) and distributed training on resume (saved {saved.actors}, "
                          f"given {given.actors})")
    fixed = {name: values for name, values in changes.items() if name not in RESUMABLE_FIELDS}
    if fixed:
        listed = ", ".join(f"{name} (saved {old!r}, given {new!r})" for name, (old, new) in fixed.items())
        raise ResumeError(f"cannot resume {run_dir}: these settings cannot change on resume, the checkpoint "
                          f"was made with the saved ones: {listed}; only {', '.join(RESUMABLE_FIELDS)} "
                          "may change")
    # The saved config with the allowed changes (an "auto" support stays the saved run's value).
    resumed = dataclasses.replace(saved, **{name: getattr(given, name) for name in RESUMABLE_FIELDS})
    latest, state, skipped = _latest_checkpoint(run_dir)
    if state is not None and bool(state.get("distributed", False)) != bool(resumed.actors):
        written, resume_with = (("the distributed program", "actors > 0") if state.get("distributed")
                                else ("the single-process trainer", "actors = 0"))
        raise ResumeError(f"cannot resume {run_dir}: {latest} was written by {written}; resume it with "
                          f"{resume_with}")
    reached = int(state.get("env_steps", 0)) if state is not None else 0
    status = str(RunDirectory(run_dir).info().get("status", "finished"))
    return ResumePlan(run_dir=run_dir, config=resumed, changes=changes, checkpoint=latest, reached=reached,
                      warnings=skipped, status=status)


def apply_resume(plan: ResumePlan) -> None:
    """Records the plan's allowed changes in the run directory (config.json, and run.json's next resume)."""
    if plan.changes:
        from dmpo.lifecycle.directory import RunDirectory

        RunDirectory(plan.run_dir).update_config(plan.config, plan.changes)
