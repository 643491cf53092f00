"""`dmpo sweep OUT [--seeds ...] [--grid KEY=V1,V2 ...] [--search optuna --space KEY=LOW:HIGH] -- FLAGS`.

Every flag is checked (each grid point's and each range's ends are parsed as `dmpo train` would) before
Ray starts; a problem is one line naming the flag. See docs/sweeps.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dmpo.utils.install import install_hint

__all__ = ["split_train_flags", "sweep"]


def _fail(message: str) -> None:
    print(f"dmpo sweep: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def split_train_flags(args: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """`sweep ... -- TRAIN FLAGS`: the sweep's own arguments and the `dmpo train` flags after `--`."""
    if "--" not in args:
        return args, ()
    at = args.index("--")
    return args[:at], tuple(args[at + 1 :])


def sweep(
    out: tyro.conf.Positional[Path],
    seeds: tuple[int, ...] = (0,),
    grid: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = (),
    space: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = (),
    search: Literal["grid", "optuna"] = "grid",
    trials: int = 0,
    metric: Literal["return"] = "return",
    scheduler: Literal["asha", "median", "none"] = "asha",
    env: str | None = None,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    cpus_per_trial: float = 1.0,
    gpus_per_trial: float = 0.0,
    resources_per_trial: str | None = None,
    max_concurrent: int | None = None,
    max_failures: int = 2,
    threshold: float | None = None,
    resamples: int = 2000,
    train_flags: tyro.conf.Suppress[tuple[str, ...]] = (),
) -> None:
    """Run many `dmpo train` runs (seeds x grid points, or an Optuna search) on Ray Tune; each trial is an
    ordinary run directory OUT/<point>/seed-<S>. The same command again continues the sweep. Flags after
    `--` go to every `dmpo train`.

    Args:
      out: the sweep folder.
      seeds: training seeds of every grid point (a search uses the first).
      grid: KEY=V1,V2,...: a `dmpo train` flag (without --) and its values; repeat for a product grid.
      space: KEY=LOW:HIGH or KEY=LOW:HIGH:log: a range for --search optuna (integers: an integer range).
      search: grid (every point x seed) or optuna (sample --space, --trials times, pruning laggards).
      trials: how many settings --search optuna samples.
      metric: what the search maximises: the evaluation return.
      scheduler: the search's pruning rule: asha (successive halving), median (median stopping) or none.
      env: the task of every trial (the same as `-- --env ENV`).
      ray_address: run the trials on this Ray cluster instead of a private local one.
      num_cpus: CPUs of the private local cluster (default: all of this machine's).
      cpus_per_trial: CPUs Ray reserves for each trial.
      gpus_per_trial: GPUs Ray reserves for each trial.
      resources_per_trial: custom Ray resources each trial asks for, as JSON, e.g. '{"worker": 1}' to place
        trials on nodes started with `ray start --resources '{"worker": 4}'`.
      max_concurrent: trials running at once (default: as many as the resources allow).
      max_failures: restarts of a trial that fails (a lost node, a crash); each resumes its checkpoint.
      threshold: evaluation return for the results' time-to-threshold columns (default: known per task).
      resamples: bootstrap resamples of the intervals in the results table.
    """
    from dmpo.sweeps.spec import (
        OWN_FLAGS,
        SweepSpecError,
        check_train_flags,
    )

    flags = (*train_flags, *(("--env", env) if env else ()))
    try:
        spec = _spec(out, seeds, grid, space, search, trials, metric, flags)
        own = [f for f in flags if f.split("=", 1)[0] in OWN_FLAGS]
        if own:
            raise SweepSpecError(f"the flags after `--` may not set {own}: the sweep sets {list(OWN_FLAGS)}")
        config = check_train_flags(flags, "the flags after `--`")
        for point in spec.points():
            check_train_flags(spec.trial_flags(point.flags(), 0), f"--grid {point.name}")
        for r in spec.space:
            for end in (r.low, r.high):
                value = str(int(end)) if r.integer else repr(end)
                check_train_flags([*flags, f"--{r.key}", value], f"--space {r.key}={value}")
        from dmpo.sweeps.runner import check_folder

        check_folder(spec)  # OUT holds nothing, or this sweep's own trials
        if not config.eval_every:
            raise SweepSpecError(
                "--eval-every 0: a sweep reads each trial's evaluations; give --eval-every N"
            )
    except SweepSpecError as error:
        _fail(str(error))
    for name, value, low in (
        ("--cpus-per-trial", cpus_per_trial, 0),
        ("--gpus-per-trial", gpus_per_trial, 0),
        ("--max-failures", max_failures, 0),
        ("--resamples", resamples, 1),
    ):
        if value < low or (name == "--cpus-per-trial" and value <= 0):
            _fail(
                f"{name} must be {'a positive number' if name == '--cpus-per-trial' else f'>= {low}'}, "
                f"got {value}"
            )
    for name, value in (("--num-cpus", num_cpus), ("--max-concurrent", max_concurrent)):
        if value is not None and value < 1:
            _fail(f"{name} must be a positive integer, got {value}")
    custom = _custom_resources(resources_per_trial)
    try:
        import ray  # noqa: F401
        from ray import tune  # noqa: F401
    except ImportError as error:
        _fail(f"dmpo sweep needs Ray Tune ({error}); install it with: {install_hint('sweep')}")
    if search == "optuna":
        try:
            import optuna  # noqa: F401
        except ImportError:
            _fail(f"--search optuna needs Optuna; install it with: {install_hint('sweep')}")
    from dmpo.sweeps.runner import Resources

    resources = Resources(ray_address, num_cpus, cpus_per_trial, gpus_per_trial, max_concurrent, max_failures,
                          custom)
    thresholds = {config.env: threshold} if threshold is not None else None
    command = ["dmpo", "sweep", *sys.argv[2:]] if sys.argv[1:2] == ["sweep"] else ["dmpo", "sweep", str(out)]
    _run(spec, resources, config, scheduler=scheduler, command=command, resamples=resamples,
         thresholds=thresholds)


def _run(spec, resources, config, *, scheduler, command, resamples, thresholds) -> None:
    from dmpo.run.distributed.cluster import ClusterError
    from dmpo.sweeps.runner import main_message, run_sweep
    from dmpo.sweeps.spec import SweepSpecError

    try:
        outcome = run_sweep(
            spec,
            resources,
            scheduler=scheduler,
            budget=(config.steps, config.eval_every),
            distributed=bool(config.actors),
            command=command,
            resamples=resamples,
            thresholds=thresholds,
        )
    except (SweepSpecError, ClusterError) as error:  # another sweep holds OUT; no cluster at --ray-address
        print(f"dmpo sweep: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    code = main_message(outcome, spec, command)
    if code:
        raise SystemExit(code)


def _custom_resources(text: str | None) -> dict[str, float]:
    import json

    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        _fail(f"--resources-per-trial must be a JSON object, e.g. '{{\"worker\": 1}}'; got {text!r} "
              f"({error.msg})")
    valid = isinstance(value, dict) and all(
        isinstance(k, str) and k not in ("CPU", "GPU") and isinstance(v, (int, float)) and v >= 0
        for k, v in value.items())
    if not valid:
        _fail(f"--resources-per-trial must map custom Ray resource names (not CPU/GPU: use --cpus-per-trial, "
              f"--gpus-per-trial) to amounts >= 0; got {text!r}")
    return {k: float(v) for k, v in value.items()}


def _spec(out, seeds, grid, space, search, trials, metric, flags):
    from dmpo.sweeps.spec import SweepSpec, SweepSpecError, parse_grid, parse_space

    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise SweepSpecError(f"--seeds must be distinct integers >= 0, got {list(seeds)}")
    if search == "grid":
        if space:
            raise SweepSpecError("--space needs --search optuna (a grid sweep takes --grid)")
        if trials:
            raise SweepSpecError("--trials needs --search optuna (a grid sweep runs every point)")
    else:
        if grid:
            raise SweepSpecError("--grid with --search optuna: give the searched settings as --space ranges")
        if not space:
            raise SweepSpecError("--search optuna needs at least one --space KEY=LOW:HIGH[:log]")
        if trials < 1:
            raise SweepSpecError(f"--trials must be a positive integer with --search optuna, got {trials}")
    return SweepSpec(
        out=Path(out).resolve(),
        seeds=tuple(seeds),
        grid=parse_grid(grid),
        space=parse_space(space),
        search=search,
        trials=trials,
        metric=metric,
        train_flags=tuple(flags),
    )
