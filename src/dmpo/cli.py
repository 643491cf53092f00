"""The `dmpo` command: `train`, `eval`, `plot` and `export`.

    dmpo train --env dmc:cartpole-swingup --steps 100000 --seed 0
    dmpo train --resume runs/20261202-120000 --steps 200000   (extend a run)
    dmpo eval runs/20261202-120000 --episodes 10 --video cartpole.mp4
    dmpo plot runs/a runs/b -o curves.png
    dmpo export runs/20261202-120000 --format onnx -o policy.onnx

Every option of `train` comes from `dmpo.config.TrainConfig` (nested: `--agent.batch-size`,
`--agent.learner.discount`, ...); `dmpo train --help` lists them with their defaults.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dmpo.config import AGENT_PRESETS, ConfigError, TrainConfig


def _fail(message: str) -> None:
    print(f"dmpo: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def train(
    config: Annotated[TrainConfig, tyro.conf.arg(name="")] = TrainConfig(),  # noqa: B008 - tyro reads it
    run_dir: Path | None = None,
    resume: Path | None = None,
    preset: Literal["default", "reference", "fast"] = "default",
    progress: bool = True,
    ray_address: str | None = None,
) -> None:
    """Train DMPO (single process, or on Ray with --actors N).

    Args:
      config: the run's configuration.
      preset: the agent config the flags apply to: default (`control_suite_preset()`), reference
        (the reference's `DMPOConfig()`) or fast (`sample_efficient_preset()`: 4x the updates per env
        step, smaller critic); flags given with it override its values, in any order.
      run_dir: where config, logs, checkpoints and snapshots go (default: runs/<timestamp>).
      resume: a run directory to continue from its newest checkpoint, with its saved config; flags
        given with it change steps, eval_every, eval_episodes, checkpoint_every, keep_checkpoints
        or actors (recorded in run.json); any other differing flag is an error.
      progress: show a live progress line on a terminal.
      ray_address: join this Ray cluster instead of starting a local one (with --actors).
    """
    from dmpo.checkpointing import CheckpointError

    del preset  # `main` has already built the config from it, so that flags apply on top
    if resume is not None:
        if run_dir is not None and Path(run_dir) != Path(resume):
            _fail("--run-dir and --resume name different directories; give only --resume RUN_DIR")
        config = _apply_resume_flags(resume, config)
        run_dir = resume
    if config.pixels:
        os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is first imported
    if config.actors:
        summary = _train_distributed(config, run_dir, resume=resume is not None, progress=progress,
                                     ray_address=ray_address)
    else:
        from dmpo.envs import EnvError
        from dmpo.runners.local import train as train_locally

        try:
            summary = train_locally(config, run_dir, resume=resume is not None, progress=progress)
        except (EnvError, FileNotFoundError, FileExistsError, CheckpointError) as error:
            _fail(str(error))
    last = summary.get("last_eval") or {}
    print(f"finished: {summary['env_steps']} env steps, run directory {summary['run_dir']}"
          + (f", last evaluation return {last['return_mean']:.1f}" if "return_mean" in last else ""))


# Settings that may differ on `--resume` (a longer budget, other periods, more actors); any other
# difference from the saved config would not match the checkpoint (networks, env, agent) and is refused.
RESUMABLE_FIELDS = ("steps", "eval_every", "eval_episodes", "checkpoint_every", "keep_checkpoints", "actors")


def _resume_argument(args: list[str]) -> Path | None:
    """The RUN of `train ... --resume RUN` (or `--resume=RUN`) in raw arguments, else None."""
    if not args or args[0] != "train":
        return None
    for index, arg in enumerate(args):
        if arg == "--resume" and index + 1 < len(args):
            return Path(args[index + 1])
        if arg.startswith("--resume="):
            return Path(arg.partition("=")[2])
    return None


def _preset_argument(args: list[str]) -> str | None:
    """The NAME of `train ... --preset NAME` (or `--preset=NAME`) in raw arguments, else None."""
    if not args or args[0] != "train":
        return None
    for index, arg in enumerate(args):
        if arg == "--preset" and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--preset="):
            return arg.partition("=")[2]
    return None


def _saved_config(run: Path) -> TrainConfig:
    from dmpo.runs import RunDirectory

    try:
        return RunDirectory.open(run).load_config(TrainConfig)
    except (FileNotFoundError, ConfigError, ValueError) as error:
        _fail(f"--resume {run}: {error}")
        raise AssertionError("unreachable") from error


def _differences(saved: object, given: object, prefix: str = "") -> dict[str, tuple[object, object]]:
    """`{dotted field: (saved, given)}` for every leaf field that differs between two configs."""
    import dataclasses

    if dataclasses.is_dataclass(saved) and type(saved) is type(given):
        found: dict[str, tuple[object, object]] = {}
        for field in dataclasses.fields(saved):
            found.update(_differences(getattr(saved, field.name), getattr(given, field.name),
                                      f"{prefix}{field.name}."))
        return found
    return {} if saved == given else {prefix.rstrip("."): (saved, given)}


def _apply_resume_flags(resume: Path, config: TrainConfig) -> TrainConfig:
    """The config to resume with: the saved one with the flags given now applied (`main` parses
    them on top of the saved config). Fails naming any field that cannot change on resume, and
    names an unusable newest checkpoint before anything is built."""
    from dmpo.checkpointing import CheckpointError
    from dmpo.runners.checkpoints import TrainingCheckpoints
    from dmpo.runs import RunDirectory

    saved = _saved_config(resume)
    changes = _differences(saved, config)
    if "actors" in changes and 0 in changes["actors"]:
        _fail(f"--resume {resume}: --actors cannot switch between single-process (0) and distributed "
              f"training on resume (saved {saved.actors}, given {config.actors})")
    fixed = {name: values for name, values in changes.items() if name not in RESUMABLE_FIELDS}
    if fixed:
        listed = ", ".join(f"{name} (saved {old!r}, given {new!r})" for name, (old, new) in fixed.items())
        _fail(f"--resume {resume}: these settings cannot change on resume, the checkpoint was made with "
              f"the saved ones: {listed}; only {', '.join(RESUMABLE_FIELDS)} may change")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            TrainingCheckpoints(Path(resume) / "checkpoints", keep=config.keep_checkpoints).latest()
        except CheckpointError as error:
            _fail(f"--resume {resume}: {error}")
    for warning in caught:
        print(f"dmpo: warning: {warning.message}", file=sys.stderr)
    warnings.filterwarnings("ignore", message="skipping unusable checkpoint")  # said once, above
    if changes:
        RunDirectory(resume).update_config(config, changes)
        for name, (old, new) in changes.items():
            print(f"resume: {name} {old} -> {new}", file=sys.stderr)
    return config


def _train_distributed(config: TrainConfig, run_dir: Path | None, *, resume: bool, progress: bool,
                       ray_address: str | None) -> dict:
    """`dmpo train --actors N`: the Ray program of `dmpo.distributed` on this TrainConfig."""
    try:  # Ray is an extra: the single-process path never imports it
        import ray  # noqa: F401
    except ImportError:
        _fail("--actors needs Ray, which is not installed; install it with: "
              "pip install 'dmpo[distributed]'")
    from dmpo.builder import environment_factory
    from dmpo.checkpointing import CheckpointError
    from dmpo.distributed import NodeFailure, run_distributed
    from dmpo.envs import EnvError
    from dmpo.runs import RunDirectory, new_run_path

    config = config.resolved()
    if not resume:
        try:
            environment_factory(config)(config.seed).close()  # an unknown task fails before a run exists
        except EnvError as error:
            _fail(str(error))
        run_dir = Path(run_dir) if run_dir is not None else new_run_path()
        try:  # the run directory records the whole TrainConfig, so that --resume can rebuild it
            RunDirectory.create(run_dir, config, seed=config.seed)
        except (FileExistsError, ConfigError) as error:
            _fail(str(error))
    try:
        result = run_distributed(config, run_dir, ray_address=ray_address, progress=progress, resume=resume)
    except (FileNotFoundError, CheckpointError) as error:
        _fail(str(error))
    except NodeFailure as error:
        print(f"dmpo: error: {error}", file=sys.stderr)
        print(f"dmpo: continue with: dmpo train --resume {run_dir}", file=sys.stderr)
        raise SystemExit(1) from error
    returns = [value for _, value in result.evaluator_returns[-config.eval_episodes or None:]]
    last_eval = {"return_mean": sum(returns) / len(returns)} if returns else None
    return {"env_steps": int(result.counts.get("actor_steps", 0)), "run_dir": result.run_dir,
            "last_eval": last_eval}


def _check_spec_matches(trained: object, environment: object, name: str) -> None:
    """The policy was trained on observations and actions of these shapes, or a clear error."""
    import jax

    from dmpo.envs import EnvError
    from dmpo.types import make_environment_spec

    def shapes(spec: object) -> object:
        return jax.tree_util.tree_map(lambda s: tuple(s.shape), spec)

    found = make_environment_spec(environment)
    for field in ("observations", "actions"):
        want, got = shapes(getattr(trained, field)), shapes(getattr(found, field))
        if want != got:
            raise EnvError(f"the policy was trained on {field} of shape {want}, {name} has {got}")


def evaluate(
    target: tyro.conf.Positional[Path],
    episodes: int = 10,
    video: Path | None = None,
    seed: int = 0,
    env: str | None = None,
) -> None:
    """Evaluate a policy snapshot (or a run directory's) with the policy mean.

    Args:
      target: a run directory or a snapshot file (snapshots/policy.msgpack).
      episodes: episodes to run.
      video: write the first episode to this .mp4 or .gif file.
      seed: environment seed.
      env: task name (default: the one the snapshot was trained on).
    """
    if episodes < 1:
        _fail(f"--episodes must be a positive integer, got {episodes}")
    if video is not None and video.suffix.lower() not in (".mp4", ".gif"):
        _fail(f"--video must name a .mp4 or .gif file, got {str(video)!r}")
    if video is not None and not video.resolve().parent.is_dir():
        _fail(f"--video {video}: the folder {video.resolve().parent} does not exist")
    from dmpo.envs import EnvError, make
    from dmpo.runners.environment_loop import evaluate as run_evaluation
    from dmpo.snapshot import SnapshotError, load_policy

    try:
        policy = load_policy(target)
    except (SnapshotError, OSError) as error:
        _fail(str(error))
    meta = policy.metadata
    name = env or meta.get("env")
    if not name:
        _fail("the snapshot does not name its environment; pass --env")
    if meta.get("pixels") or video is not None:
        os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is first imported
    try:
        environment = make(name, seed=seed, pixels=bool(meta.get("pixels")),
                           action_repeat=meta.get("action_repeat"), render=video is not None)
        _check_spec_matches(policy.environment_spec, environment, name)
        result = run_evaluation(environment, policy, episodes, video_path=video)
    except (EnvError, OSError, ValueError, TypeError) as error:  # one line, not a traceback
        _fail(f"eval {target} on {name}: {error}")
    print(f"{name}: return {result['return_mean']:.1f} ± {result['return_std']:.1f} "
          f"(min {result['return_min']:.1f}, max {result['return_max']:.1f}) over {episodes} episodes, "
          f"mean length {result['length_mean']:.0f}")
    if video is not None:
        print(f"video: {video}")


def plot(
    runs: tyro.conf.Positional[tuple[Path, ...]],
    output: Annotated[Path, tyro.conf.arg(aliases=("-o",))] = Path("curves.png"),
    x: str = "actor_steps",
    y: str | None = None,
    label: str = "evaluator",
) -> None:
    """Plot learning curves of one or more runs (seeds of one config are averaged, spread shaded).

    Args:
      runs: run directories.
      output: PNG file to write.
      x: column for the x axis.
      y: column for the y axis (default: return_mean for the evaluator, episode_return otherwise).
      label: which log to read: evaluator or environment_loop.
    """
    from dmpo.plotting import plot_runs

    if not runs:
        _fail("give at least one run directory")
    y = y or ("return_mean" if label == "evaluator" else "episode_return")
    try:
        path = plot_runs(list(runs), output, x=x, y=y, label_source=label)
    except (FileNotFoundError, ValueError, KeyError) as error:
        _fail(str(error))
    print(f"wrote {path}")


def export(
    target: tyro.conf.Positional[Path],
    format: Literal["onnx", "stablehlo"],  # noqa: A002 - the flag users type is --format
    output: Annotated[Path, tyro.conf.arg(aliases=("-o",))],
    best: bool = False,
) -> None:
    """Export the deterministic policy (observation network + policy mean) for use without dmpo.

    Args:
      target: a run directory or a snapshot file.
      format: onnx (needs the export extra: pip install 'dmpo[export]') or stablehlo (jax.export).
      output: file to write.
      best: export snapshots/best.msgpack (the best-evaluated policy) instead of the latest.
    """
    from dmpo.export import ExportError, export_policy

    try:
        path = export_policy(target, output, format, best=best)
    except (ExportError, OSError) as error:
        _fail(str(error))
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    # dm_control probes GLFW on import and warns on headless machines even when nothing renders.
    warnings.filterwarnings("ignore", message=".*DISPLAY environment variable is missing")
    args = list(sys.argv[1:] if argv is None else argv)
    resume, preset = _resume_argument(args), _preset_argument(args)
    if resume is not None and preset is not None:
        _fail(f"--preset {preset} with --resume {resume}: a resumed run keeps the config it was saved "
              "with; give only --resume")
    try:
        # With --resume (or --preset), the flags given are parsed on top of the saved config (or the
        # preset's), so that exactly those flags count (`_apply_resume_flags` checks which may change).
        if resume is not None:
            train_command = functools.partial(train, config=_saved_config(resume))
        elif preset in AGENT_PRESETS:  # an unknown name is left to tyro, which lists the choices
            train_command = functools.partial(train, config=TrainConfig(agent=AGENT_PRESETS[preset]()))
        else:
            train_command = train
        tyro.extras.subcommand_cli_from_dict(
            {"train": train_command, "eval": evaluate, "plot": plot, "export": export},
            args=args,
            description="Distributional MPO (DMPO) for continuous control.",
        )
    except ConfigError as error:  # tyro reports nested configs itself; the top-level one lands here
        _fail(str(error))


if __name__ == "__main__":
    main()
