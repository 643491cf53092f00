"""Running a sweep on Ray Tune: every trial a `dmpo.sweeps.trial.SweepTrial`, on a private local Ray
cluster (`dmpo.run.distributed.cluster`) or on an existing one.

* A grid sweep (`--grid`, `--seeds`) is one Tune grid search over (point, seed), started afresh each time:
  each trial's folder says whether it is finished (only read), to resume, or to start, so running the
  same command again continues the sweep and leaves finished run directories untouched.
* A search (`--search optuna`) samples `--space` with Ray Tune's Optuna searcher and prunes with ASHA
  (successive halving on the evaluation return, by env steps) or the median stopping rule; running the
  same command again restores the Tune experiment (`Tuner.restore`), the searcher's state included.

SIGTERM is handled as Ctrl-C: Tune stops every trial, each of which interrupts its `dmpo train` (a
checkpoint is written), and the sweep exits 130; the same command continues it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from dmpo.sweeps.results import find_trials, read_trial, run_status, write_results
from dmpo.sweeps.spec import SweepSpec, SweepSpecError
from dmpo.utils.files import atomic_write_text
from dmpo.utils.formats import SWEEP, read_header

__all__ = ["Resources", "SweepOutcome", "run_sweep"]

_STATE = "sweep.json"
_KILL_CHILDREN = "RAY_kill_child_processes_on_worker_exit"
_STOP_WAIT_S = 600.0  # a stopped trial's `dmpo train` writes its checkpoint (replay included) first


def _as_sigint(signum: int, frame: object) -> None:
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)


def _wait_for_runs(runs: Sequence[Path]) -> None:
    """Waits until no `dmpo train` holds a trial's run lock (a stopped trial writing its checkpoint),
    so that the table reads finished files and a new sweep finds the runs free."""
    import time

    from dmpo.lifecycle.lock import is_mine_or_free

    deadline = time.monotonic() + _STOP_WAIT_S
    busy = [run for run in runs if not is_mine_or_free(run)]
    if busy:
        print(f"waiting for {len(busy)} trial(s) to write their checkpoints", flush=True)
    while busy and time.monotonic() < deadline:
        time.sleep(0.5)
        busy = [run for run in busy if not is_mine_or_free(run)]
    if busy:
        print(f"dmpo sweep: warning: still running after {_STOP_WAIT_S:.0f} s: {', '.join(map(str, busy))}",
              file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class Resources:
    """Where trials run and what each asks Ray for."""

    ray_address: str | None = None
    num_cpus: int | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None
    max_failures: int = 2
    custom: dict[str, float] = dataclasses.field(default_factory=dict)
    """Custom Ray resources each trial asks for (to place trials on nodes that have them)."""


@dataclasses.dataclass(frozen=True)
class SweepOutcome:
    trials: int
    finished: int
    pruned: int
    failed: int
    interrupted: bool
    best_flags: tuple[str, ...] | None


def _defining(spec: SweepSpec) -> dict:
    """What the folder's trials were made with: running another sweep into it would mix settings."""
    found = {"train_flags": list(spec.train_flags), "search": spec.search}
    if spec.search != "grid":
        found.update(
            space=[dataclasses.asdict(r) for r in spec.space],
            seed=spec.seeds[0],
            trials=spec.trials,
            metric=spec.metric,
        )
    return found


def check_folder(spec: SweepSpec) -> None:
    """OUT is new, or holds a sweep made with the same settings (another grid value or seed may be
    added); one line naming what differs otherwise."""
    path = spec.out / _STATE
    if not path.is_file():
        from dmpo.lifecycle.lock import LOCK_NAME  # a sweep starting there holds its lock before sweep.json

        if spec.out.exists() and any(path.name != LOCK_NAME for path in spec.out.iterdir()):
            raise SweepSpecError(
                f"OUT {spec.out} exists and is not a sweep folder (no {_STATE}); give a new or empty folder"
            )
        return
    saved = _read_state(path).get("defining", {})
    given = _defining(spec)
    differing = [name for name in given if saved.get(name) != given[name]]
    if differing:
        listed = "; ".join(f"{name}: saved {saved.get(name)!r}, given {given[name]!r}" for name in differing)
        raise SweepSpecError(
            f"OUT {spec.out} holds a sweep made with other settings ({listed}); use another folder"
        )


def _without_tune_resume_hint(record: logging.LogRecord) -> bool:
    """Tune's "Resume experiment with: Tuner.restore(...)" on a stopped sweep: the way to continue a
    sweep is the same command, which dmpo's own last line gives."""
    return "Resume experiment with:" not in record.getMessage()


def _read_state(path: Path) -> dict:
    state = json.loads(path.read_text(encoding="utf-8"))
    read_header(state, SWEEP, str(path), SweepSpecError)
    return state


def _save_state(spec: SweepSpec, command: Sequence[str]) -> None:
    path = spec.out / _STATE
    state = _read_state(path) if path.is_file() else {"commands": []}
    if command not in state["commands"]:
        state["commands"].append(list(command))
    state["defining"] = _defining(spec)
    atomic_write_text(path, json.dumps({**SWEEP.header(), **state}, indent=2) + "\n")


def _grid_space(spec: SweepSpec, common: dict) -> dict:
    from ray import tune

    trials = [
        {"point": point.name, "point_flags": point.flags(), "seed": seed}
        for point in spec.points()
        for seed in spec.seeds
    ]
    return {"common": common, "trial": tune.grid_search(trials)}


def _tuner(spec: SweepSpec, resources: Resources, common: dict, scheduler_name: str, budget: tuple[int, int]):
    from ray import tune

    bundle = {"CPU": resources.cpus_per_trial, "GPU": resources.gpus_per_trial, **resources.custom}
    trainable = tune.with_resources(_trainable(), tune.PlacementGroupFactory([bundle]))

    storage = str((spec.out / ".tune").resolve())
    run_config = tune.RunConfig(
        name=spec.search,
        storage_path=storage,
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=resources.max_failures),
        # The run directory is the trial's checkpoint (a restarted trial resumes it); Tune keeps none.
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0, checkpoint_at_end=False),
    )
    if spec.search == "grid":
        return tune.Tuner(
            trainable,
            param_space=_grid_space(spec, common),
            run_config=run_config,
            tune_config=tune.TuneConfig(max_concurrent_trials=resources.max_concurrent,
                                        trial_dirname_creator=_trial_folder),
        )
    from ray.tune.search.optuna import OptunaSearch

    from dmpo.sweeps.pruning import make_scheduler

    space = {"common": common, **{r.key: r.sampler() for r in spec.space}}
    experiment = Path(storage) / spec.search
    if tune.Tuner.can_restore(str(experiment)):
        return tune.Tuner.restore(
            str(experiment), trainable, resume_unfinished=True, resume_errored=True, param_space=space
        )
    tune_config = tune.TuneConfig(
        metric="return",
        mode="max",
        num_samples=spec.trials,
        max_concurrent_trials=resources.max_concurrent,
        search_alg=OptunaSearch(seed=spec.seeds[0]),
        trial_dirname_creator=_trial_folder,
        scheduler=make_scheduler(scheduler_name, spec.out, *budget),
    )
    return tune.Tuner(trainable, param_space=space, run_config=run_config, tune_config=tune_config)


def _trial_folder(trial) -> str:
    return trial.trial_id


def _trainable():
    from dmpo.sweeps.trial import SweepTrial

    return SweepTrial


def _best_flags(spec: SweepSpec, trials) -> tuple[str, ...] | None:
    finished = [t for t in trials if t.status == "finished" and t.final_return is not None]
    if not finished:
        return None
    best = max(finished, key=lambda t: t.final_return)
    return (*spec.train_flags, *best.flags)


def run_sweep(
    spec: SweepSpec,
    resources: Resources,
    *,
    scheduler: str,
    budget: tuple[int, int],
    distributed: bool,
    command: Sequence[str],
    resamples: int = 10_000,
    thresholds: dict[str, float] | None = None,
) -> SweepOutcome:
    """Runs (or continues) the sweep, then writes its results table; `budget` is (steps, eval_every)."""
    check_folder(spec)
    made = not spec.out.exists()
    spec.out.mkdir(parents=True, exist_ok=True)
    try:
        with _sweep_lock(spec.out):
            return _run_locked(spec, resources, scheduler=scheduler, budget=budget, distributed=distributed,
                               command=command, resamples=resamples, thresholds=thresholds)
    except BaseException:
        if made and not (spec.out / _STATE).is_file():  # stopped before anything was recorded: no trace
            shutil.rmtree(spec.out, ignore_errors=True)
        raise


@contextlib.contextmanager
def _sweep_lock(out: Path) -> Iterator[None]:
    """One sweep at a time in a folder: a second would start the same trials, or restore the same Tune
    experiment, beside the first."""
    from dmpo.lifecycle.lock import RunLockedError, acquire, release

    try:
        acquire(out)
    except RunLockedError as error:  # (a file system without locks says so in its own words)
        raise SweepSpecError(str(error).replace("run directory", "sweep folder", 1)) from None
    try:
        yield
    finally:
        release(out)


def _run_locked(spec: SweepSpec, resources: Resources, *, scheduler: str, budget: tuple[int, int],
                distributed: bool, command: Sequence[str], resamples: int,
                thresholds: dict[str, float] | None) -> SweepOutcome:
    import ray

    from dmpo.run.distributed.cluster import ray_cluster

    plan = [spec.out / p.name / f"seed-{s}" for p in spec.points() for s in spec.seeds]
    if spec.search == "grid":
        counts: dict[str, int] = {}
        for run in plan:
            state = "finished" if run_status(run) == "finished" else "resume" if run.exists() else "start"
            counts[state] = counts.get(state, 0) + 1
        print(
            f"{len(plan)} trials in {spec.out}: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
            flush=True,
        )
    # A trial's `dmpo train` must outlive its Ray worker long enough to write its checkpoint: Tune kills
    # the workers of stopped trials after a few seconds, and Ray would kill their child processes too.
    saved_env = os.environ.get(_KILL_CHILDREN)
    os.environ[_KILL_CHILDREN] = "false"
    try:
        with ray_cluster(resources.ray_address, num_cpus=resources.num_cpus) as cluster:
            _save_state(spec, command)  # once a cluster answers: a sweep that never ran leaves no sweep.json
            common = {
                "out": str(spec.out.resolve()),
                "train_flags": list(spec.train_flags),
                "distributed": distributed,
                "ray_address": cluster.address,
                "keys": [r.key for r in spec.space],
                "seed": spec.seeds[0],
            }
            # Tune stops the experiment on SIGINT (its handler, installed by `fit`); SIGTERM does the same.
            # Installed after `ray.init`, which sets a SIGTERM handler of its own that exits at once.
            previous = signal.signal(signal.SIGTERM, _as_sigint)
            tune_log = logging.getLogger("ray.tune.tune")
            tune_log.addFilter(_without_tune_resume_hint)
            try:
                _tuner(spec, resources, common, scheduler, budget).fit()
            finally:
                tune_log.removeFilter(_without_tune_resume_hint)
                signal.signal(signal.SIGTERM, previous)
            del ray  # imported above so that a missing Ray fails before the cluster is asked for
    finally:
        if saved_env is None:
            os.environ.pop(_KILL_CHILDREN, None)
        else:
            os.environ[_KILL_CHILDREN] = saved_env
    _wait_for_runs(find_trials(spec.out))
    from dmpo.sweeps.pruning import pruned_runs

    state = _read_state(spec.out / _STATE)
    pruned = pruned_runs(spec.out)
    trials = [read_trial(run, thresholds, pruned) for run in find_trials(spec.out)]
    preamble = [f"Made by `{shlex.join(c)}`." for c in state["commands"]]
    write_results(spec.out, trials, resamples=resamples, preamble=preamble)
    wanted = set(plan) if spec.search == "grid" else {t.run for t in trials}
    statuses = [t.status for t in trials if t.run in wanted]
    missing = len(wanted) - len(statuses)
    if spec.search != "grid":  # a search stopped early has sampled fewer trials than asked
        missing = max(0, spec.trials - len(statuses))
    return SweepOutcome(
        trials=len(statuses) + missing,
        finished=statuses.count("finished"),
        pruned=sum(str(t.run) in pruned for t in trials if t.run in wanted),  # finished after all or not
        failed=statuses.count("failed"),
        interrupted=missing > 0 or any(s not in ("finished", "pruned", "failed") for s in statuses),
        best_flags=_best_flags(spec, trials) if spec.search != "grid" else None,
    )


def main_message(outcome: SweepOutcome, spec: SweepSpec, command: Sequence[str]) -> int:
    """Prints the sweep's ending lines; returns the exit code (130: stopped early, 1: a trial failed)."""
    print(
        f"{outcome.trials} trials: {outcome.finished} finished, {outcome.pruned} pruned, {outcome.failed} "
        f"failed; results in {spec.out / 'results.md'}, {spec.out / 'results.csv'}, {spec.out / 'points.csv'}"
    )
    if outcome.best_flags is not None:
        print("best: dmpo train " + shlex.join(outcome.best_flags))
    if outcome.interrupted:
        print(
            "stopped before every trial finished; the same command continues the sweep: "
            + shlex.join(command),
            file=sys.stderr,
        )
        return 130
    if outcome.failed:
        print(f"{outcome.failed} trial(s) failed; their output is under {spec.out / '.logs'}",
              file=sys.stderr)
        return 1
    return 0
