"""The `dmpo` command: `train`, `eval`, `plot`, `export`, `check-env` and `sweep`.

    dmpo train --env dmc:cartpole-swingup --steps 100000 --seed 0
    dmpo train --resume runs/20261202-120000 --steps 200000   (extend a run)
    dmpo eval runs/20261202-120000 --episodes 10 --video cartpole.mp4
    dmpo plot runs/a runs/b -o curves.png
    dmpo check-env my_pkg.envs:make_env          (what the agent will see, or why it cannot learn it)
    dmpo export runs/20261202-120000 --format onnx -o policy.onnx
    dmpo sweep sweeps/ns --seeds 0 1 2 --grid agent.learner.num-samples=10,20 -- --env dmc:walker-walk

Every option of `train` comes from `dmpo.config.TrainConfig` (nested: `--agent.batch-size`,
`--agent.learner.discount`, ...); `dmpo train --help` lists them with their defaults.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dmpo.cli.flags import flag_message, known_flags, unknown_flag_message
from dmpo.config import AGENT_PRESETS, ConfigError, ParsedConfigError, TrainConfig, parsing_flags

# Settings that may differ on `--resume` (a longer budget, other periods, more actors); any other
# difference from the saved config would not match the checkpoint (networks, env, agent) and is refused.
RESUMABLE_FIELDS = ("steps", "eval_every", "eval_episodes", "checkpoint_every", "keep_checkpoints", "actors",
                    "stop_at_return", "video_every")


def _fail(message: str) -> None:
    print(f"dmpo: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def train(
    config: Annotated[TrainConfig, tyro.conf.arg(name="")] = TrainConfig(),  # noqa: B008 - tyro reads it
    run_dir: Path | None = None,
    resume: Path | None = None,
    preset: Literal["fast", "control", "reference"] = "fast",
    progress: bool = True,
    ray_address: str | None = None,
    actor_resources: str | None = None,
    learner_resources: str | None = None,
    replay_resources: str | None = None,
    keep_ray_logs: bool = False,
    stop_timeout: float | None = None,
) -> None:
    """Train DMPO (single process, or on Ray with --actors N).

    Args:
      config: the run's configuration.
      preset: the agent config the flags apply to: fast (`sample_efficient_preset()`, the default:
        one update per 2 env steps on a 256-256-256 critic, the only preset to reach a good policy
        on every task of the time-to-score benchmark), control (`control_suite_preset()`: the
        reference's update ratio, learning rates 3e-4) or reference (the reference's `DMPOConfig()`);
        flags given with it override its values, in any order.
      run_dir: where config, logs, checkpoints and snapshots go (default: runs/<timestamp>).
      resume: a run directory to continue from its newest checkpoint, with its saved config; flags
        given with it may change RESUMABLE_FLAGS (--actors between distributed counts only),
        recorded in config.json and run.json; any other differing flag is an error.
      progress: show a live progress line on a terminal.
      ray_address: join this Ray cluster instead of starting a local one (with --actors).
      actor_resources: Ray resources each actor (and the evaluator) asks for, as JSON, e.g.
        '{"worker": 1}' to place them on nodes started with `ray start --resources '{"worker": 8}'`.
      learner_resources: Ray resources the learner asks for (JSON), e.g. '{"learner_node": 1}'.
      replay_resources: Ray resources the replay node asks for (JSON).
      keep_ray_logs: with --actors on a private cluster: keep its session files (Ray's logs, in a
        `dmpo-ray-*` folder of the system temp folder) after the run instead of removing them.
      stop_timeout: seconds a stop of --actors waits, in all, for the learner's final checkpoint, the
        actors and the evaluator (default 20); keep it below the grace period of your scheduler
        (SLURM: 30 s between SIGTERM and SIGKILL).
    """
    from dmpo.config import flags_parsed
    from dmpo.lifecycle.directory import check_run_path
    from dmpo.lifecycle.interrupts import exit_code, message
    from dmpo.lifecycle.lock import RunLockedError, run_lock
    from dmpo.reporting.trackers import TrackerError, check_installed

    flags_parsed()
    del preset  # `main` has already built the config from it, so that flags apply on top
    resources = {"actor_resources": actor_resources, "learner_resources": learner_resources,
                 "replay_resources": replay_resources}
    if any(resources.values()) and not config.actors:
        _fail("--actor-resources, --learner-resources and --replay-resources place Ray nodes; they need "
              "--actors N (N >= 1)")
    if keep_ray_logs and (not config.actors or ray_address is not None):
        _fail("--keep-ray-logs keeps the files of the private Ray cluster that --actors N starts; "
              + ("it needs --actors N (N >= 1)" if not config.actors else
                 "with --ray-address the cluster's files are where its `ray start` put them"))
    if stop_timeout is not None and not config.actors:
        _fail("--stop-timeout bounds the stop of the Ray nodes; it needs --actors N (N >= 1) (one process "
              "writes its final checkpoint itself, however long it takes)")
    if stop_timeout is not None and not stop_timeout > 0:
        _fail(f"--stop-timeout must be a number of seconds > 0, got {stop_timeout}")
    # A malformed JSON flag fails before anything starts (without the flags, Ray is not imported here).
    placement = _parse_resources(resources) if any(resources.values()) else None
    if stop_timeout is not None:
        placement = {**(placement or {}), "stop_timeout_seconds": float(stop_timeout)}
    try:
        check_installed(config.track)  # a missing tracker package: one line, before anything starts
    except ConfigError as error:
        _fail(str(error))
    try:
        with contextlib.ExitStack() as stack:
            if resume is not None:
                if run_dir is not None and Path(run_dir) != Path(resume):
                    _fail("--run-dir and --resume name different directories; give only --resume RUN_DIR")
                check_run_path(resume)
                stack.enter_context(run_lock(resume))  # before the checkpoints are read (dmpo.lifecycle.lock)
                config = _apply_resume_flags(resume, config)
                run_dir = resume
            elif run_dir is not None:
                check_run_path(run_dir)
            _check_before_training(config)
            summary = _train(config, run_dir, resume=resume is not None, progress=progress,
                             ray_address=ray_address, resources=placement, keep_ray_logs=keep_ray_logs)
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM, SIGHUP: the checkpoint is written already
        print(f"dmpo: {message(error)}", file=sys.stderr)
        done = SystemExit(exit_code(error))
        done.interrupted = True  # type: ignore[attr-defined] - `dmpo.cli.main` exits at once on it
        raise done from None
    except RunLockedError as error:
        _fail(str(error))
    except TrackerError as error:  # the run folder says "failed" with the same line
        print(f"dmpo: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as error:  # a file-system problem (permissions, full disk): the message names the path
        _fail(str(error))
    last = summary.get("last_eval") or {}
    print(f"finished: {summary['env_steps']} env steps, run directory {summary['run_dir']}"
          + (f", last evaluation return {last['return_mean']:.1f}" if "return_mean" in last else ""))
    if summary.get("stop_reason"):
        print(f"stopped early: {summary['stop_reason']}")


# The --resume help names the fields `_apply_resume_flags` lets change, from the one list of them.
train.__doc__ = train.__doc__.replace(
    "RESUMABLE_FLAGS", ", ".join("--" + name.replace("_", "-") for name in RESUMABLE_FIELDS))


def _check_before_training(config: TrainConfig) -> None:
    """Warnings and checks on the final config (after --resume's flags), before anything starts."""
    from dmpo.cli.flags import budget_warnings

    for warning in budget_warnings(config):
        print(f"dmpo: warning: {warning}", file=sys.stderr)
    if config.pixels or config.video_every:
        os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is first imported
    if config.video_every:
        from dmpo.builder import environment_factory
        from dmpo.envs import EnvError
        from dmpo.reporting.videos import check_can_film

        try:  # e.g. gym classic-control tasks without pygame: said now, not at the first video
            check_can_film(environment_factory(config), config.seed)
        except EnvError as error:
            _fail(f"--video-every {config.video_every}: {error}")


def _train(config: TrainConfig, run_dir: Path | None, *, resume: bool, progress: bool,
           ray_address: str | None, resources: dict | None = None, keep_ray_logs: bool = False) -> dict:
    from dmpo.utils.checkpointing import CheckpointError

    if config.pixels:
        os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is first imported
    if config.actors:
        return _train_distributed(config, run_dir, resume=resume, progress=progress,
                                  ray_address=ray_address, resources=resources, keep_ray_logs=keep_ray_logs)
    from dmpo.envs import EnvError
    from dmpo.runners.local import train as train_locally

    try:
        return train_locally(config, run_dir, resume=resume, progress=progress)
    except (EnvError, FileNotFoundError, FileExistsError, CheckpointError) as error:
        _fail(str(error))
        raise AssertionError("unreachable") from error


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
    from dmpo.lifecycle.directory import RunDirectory

    try:
        return RunDirectory.open(run).load_config(TrainConfig)
    except (FileNotFoundError, ConfigError, ValueError) as error:
        _fail(f"--resume {run}: {error}")
        raise AssertionError("unreachable") from error


def _apply_resume_flags(resume: Path, config: TrainConfig) -> TrainConfig:
    """The config to resume with: the saved one with the flags given now applied (`main` parses
    them on top of the saved config), by the library's resume rules (`dmpo.lifecycle.resume`): a
    refused change or an unusable newest checkpoint is one line, before anything is built."""
    from dmpo.lifecycle.resume import ResumeError, apply_resume, plan_resume

    try:
        plan = plan_resume(resume, config)
    except ResumeError as error:
        _fail(str(error))  # it names the run and the reason
        raise AssertionError("unreachable") from error
    if plan.nothing_to_do:  # nothing to train: change nothing
        print(f"{resume} already reached {plan.reached} env steps (steps {plan.config.steps}); nothing to "
              f"do. Pass --steps with a larger number to extend it.")
        raise SystemExit(0)
    for warning in plan.warnings:
        print(f"dmpo: warning: {warning}", file=sys.stderr)
    warnings.filterwarnings("ignore", message="skipping unusable checkpoint")  # said once, above
    if plan.checkpoint is not None:  # the skipped ones are moved aside at the next save: said once, above
        from dmpo.lifecycle.checkpoints import TrainingCheckpoints

        paths = [path.name for path in TrainingCheckpoints(Path(resume) / "checkpoints").paths()]
        newer = paths[paths.index(plan.checkpoint.name) + 1:] if plan.checkpoint.name in paths else []
        for skipped in newer:
            warnings.filterwarnings("ignore", message=rf"checkpoint .*{re.escape(skipped)} is unusable")
    apply_resume(plan)
    for name, (old, new) in plan.changes.items():
        print(f"resume: {name} {old} -> {new}", file=sys.stderr)
    if plan.from_scratch:
        print(f"resume: {resume} has no checkpoint yet; training starts again from step 0 with its saved "
              "config", file=sys.stderr)
    return plan.config


def _parse_resources(flags: dict[str, str | None]) -> dict[str, dict[str, float] | None]:
    """`--actor-resources '{"worker": 1}'` and co.: JSON objects of resource name -> amount >= 0."""
    import json

    try:
        from dmpo.distributed.options import valid_resources
    except ImportError:
        _fail("--actors needs Ray, which is not installed; install it with: pip install 'dmpo[distributed]'")

    parsed = {}
    for name, text in flags.items():
        flag = "--" + name.replace("_", "-")
        try:
            value = None if text is None else json.loads(text)
        except json.JSONDecodeError as error:
            _fail(f"{flag} must be a JSON object of Ray resource names and amounts, e.g. "
                  f"'{{\"worker\": 1}}'; got {text!r} ({error.msg})")
        if not valid_resources(value):
            _fail(f"{flag} must map custom Ray resource names (not CPU/GPU) to amounts >= 0, e.g. "
                  f"'{{\"worker\": 1}}'; got {text!r}")
        parsed[name] = value
    return parsed


def _train_distributed(config: TrainConfig, run_dir: Path | None, *, resume: bool, progress: bool,
                       ray_address: str | None, resources: dict | None = None,
                       keep_ray_logs: bool = False) -> dict:
    """`dmpo train --actors N`: the Ray program of `dmpo.distributed` on this TrainConfig."""
    try:  # Ray is an extra: the single-process path never imports it
        import ray  # noqa: F401
    except ImportError:
        _fail("--actors needs Ray, which is not installed; install it with: "
              "pip install 'dmpo[distributed]'")
    from dmpo.distributed import NodeFailure, PlacementError, ProgramOptions, run_distributed
    from dmpo.distributed.cluster import ClusterError
    from dmpo.envs import EnvError
    from dmpo.lifecycle.directory import RunDirectory, new_run_path
    from dmpo.lifecycle.task_setup import prepare_task
    from dmpo.utils.checkpointing import CheckpointError

    config = config.resolved()
    if not resume:
        try:  # an unusable task fails before a run exists; an 'auto' support is resolved for config.json
            config, _ = prepare_task(config, distributed=True)
        except EnvError as error:
            _fail(str(error))
        run_dir = Path(run_dir) if run_dir is not None else new_run_path()
        try:  # the run directory records the whole TrainConfig, so that --resume can rebuild it
            RunDirectory.create(run_dir, config, seed=config.seed)
        except (FileExistsError, ConfigError) as error:
            _fail(str(error))
    try:
        result = run_distributed(config, run_dir, ray_address=ray_address, progress=progress, resume=resume,
                                 options=ProgramOptions(**(resources or {})), keep_ray_logs=keep_ray_logs)
    except (FileNotFoundError, CheckpointError, PlacementError) as error:
        _fail(str(error))
    except EnvError as error:  # an environment that failed the same way twice: as in one process
        _fail(str(error))
    except ClusterError as error:  # at start-up: run.json says "failed" with the same line
        print(f"dmpo: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except NodeFailure as error:
        print(f"dmpo: error: {error}", file=sys.stderr)
        print(f"dmpo: continue with: dmpo train --resume {run_dir}", file=sys.stderr)
        raise SystemExit(1) from error
    last_eval = result.evaluation_rows[-1] if result.evaluation_rows else None
    return {"env_steps": int(result.counts.get("actor_steps", 0)), "run_dir": result.run_dir,
            "last_eval": result.last_evaluation or last_eval, "stop_reason": result.stop_reason}


def _check_output(flag: str, path: Path) -> None:
    """An output file's folder exists and can be written, or one line naming it, before any work."""
    folder = path.resolve().parent
    if not folder.is_dir():
        _fail(f"{flag} {path}: the folder {folder} does not exist")
    if path.is_dir():
        _fail(f"{flag} {path} is a folder; name a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        _fail(f"{flag} {path}: cannot write to the folder {folder} (permission denied)")


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
    best: bool = False,
    camera: str | None = None,
) -> None:
    """Evaluate a policy snapshot (or a run directory's) with the policy mean.

    Args:
      target: a run directory or a snapshot file (snapshots/policy.msgpack).
      best: with a run directory, the best-evaluated policy (snapshots/best.msgpack) instead of the latest.
      episodes: episodes to run.
      video: write the first episode to this .mp4 or .gif file.
      seed: environment seed.
      env: task name (default: the one the snapshot was trained on).
      camera: the video's camera, by name or index (default: one that follows the body where the
        task has one: dm_control's camera 0, gymnasium MuJoCo's `track` camera).
    """
    if episodes < 1:
        _fail(f"--episodes must be a positive integer, got {episodes}")
    if video is not None and video.suffix.lower() not in (".mp4", ".gif"):
        _fail(f"--video must name a .mp4 or .gif file, got {str(video)!r}")
    if video is not None:
        _check_output("--video", video)
    from dmpo.envs import EnvError, make
    from dmpo.policies.snapshot import SnapshotError, load_policy
    from dmpo.runners.environment_loop import evaluate as run_evaluation

    if best:
        if not target.is_dir():
            _fail(f"--best needs a run directory, got the file {target}")
        target = target / "snapshots" / "best.msgpack"
        if not target.is_file():
            _fail(f"--best: {target} does not exist (the run has not evaluated yet, or evaluates with "
                  "eval_every 0)")
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
        from dmpo.reporting.videos import camera_render_fn, parse_camera

        # The environment from `make` maps canonical actions onto the task's bounds itself.
        result = run_evaluation(environment, policy.canonical_action, episodes, video_path=video,
                                render_fn=camera_render_fn(parse_camera(camera)))
    except (EnvError, OSError, ValueError, TypeError) as error:  # one line, not a traceback
        _fail(f"eval {target} on {name}: {error}")
    print(f"{name}: return {result['return_mean']:.1f} ± {result['return_std']:.1f} "
          f"(min {result['return_min']:.1f}, max {result['return_max']:.1f}) over {episodes} "
          f"episode{'s' if episodes != 1 else ''}, "
          f"mean length {result['length_mean']:.0f}")
    if video is not None:
        print(f"video: {video}")


def plot(
    runs: tyro.conf.Positional[tuple[Path, ...]],
    output: Annotated[Path, tyro.conf.arg(aliases=("-o",))] = Path("curves.png"),
    x: str = "actor_steps",
    y: str | None = None,
    label: str = "evaluator",
    band: Literal["minmax", "std", "ci95"] = "minmax",
    smooth: int = 1,
    per_seed: bool = False,
    title: str | None = None,
) -> None:
    """Plot learning curves of one or more runs: runs whose configs differ only in seed and --steps
    are averaged, their spread shaded. A `dmpo sweep` folder: one curve per grid point, its band over seeds.

    Args:
      runs: run directories, or one sweep folder.
      output: PNG file to write.
      x: column for the x axis.
      y: column for the y axis (default: return_mean for the evaluator, episode_return otherwise).
      label: which log to read: evaluator or environment_loop.
      band: the shaded band: min-max of the runs, mean ± std, or the 95% confidence interval of the mean.
      smooth: average each run's last N points (trailing moving average) before anything else.
      per_seed: also draw each run's own curve, thin.
      title: the plot's title (default: the task(s), the y column and the log).
    """
    from dmpo.reporting.plotting import plot_runs
    from dmpo.sweeps.results import sweep_runs

    if not runs:
        _fail("give at least one run directory")
    group_by = None
    if any((run / "sweep.json").is_file() for run in runs):  # a sweep folder: one curve per grid point
        if len(runs) > 1:
            _fail("give one sweep folder, or run directories")
        folder, runs = runs[0], tuple(sweep_runs(runs[0]))
        if not runs:
            _fail(f"the sweep {folder} has no trial with an evaluation yet")
        group_by = _grid_point
    _check_output("--output", output)
    y = y or ("return_mean" if label == "evaluator" else "episode_return")
    if smooth < 1:
        _fail(f"--smooth must be a positive integer, got {smooth}")
    try:
        path = plot_runs(list(runs), output, x=x, y=y, label_source=label, spread=band, smoothing=smooth,
                         per_seed=per_seed, title=title, group_by=group_by)
    except (OSError, ValueError, KeyError) as error:  # OSError: its message names the path
        _fail(str(error))
    print(f"wrote {path}")


def _grid_point(run: Path) -> str:
    return run.parent.name


def check_env(
    env: tyro.conf.Positional[str],
    steps: int = 100,
    seed: int = 0,
    action_repeat: int | None = None,
    pixels: bool = False,
    observation_network: Literal["flatten", "impala", "drq"] = "flatten",
) -> None:
    """Check that DMPO can learn ENV: build it, take random steps through the whole pipeline and print
    the specs the agent will see (or the first problem, in one line).

    Args:
      env: task name, as for train --env (dmc:, gym:, gym:<module>:<Id> or module.path:callable).
      steps: random agent steps to take.
      seed: environment seed.
      action_repeat: as for train (default: 1 for states, 2 for pixels).
      pixels: camera observations (dmc: tasks).
      observation_network: the torso the agent would use (image observations need impala or drq).
    """
    if steps < 1:
        _fail(f"--steps must be a positive integer, got {steps}")
    if pixels:
        os.environ.setdefault("MUJOCO_GL", "egl")
    from dmpo.envs import EnvError, TaskFactory
    from dmpo.envs.checks import check_environment

    try:
        report = check_environment(TaskFactory(env, pixels=pixels, action_repeat=action_repeat), steps=steps,
                                   seed=seed, observation_network=observation_network)
    except EnvError as error:
        _fail(str(error) if str(error).startswith(env) else f"{env}: {error}")
    print(f"{env}: DMPO can learn it\n{report}")

def export(
    target: tyro.conf.Positional[Path],
    format: Literal["onnx", "stablehlo"],  # noqa: A002 - the flag users type is --format
    output: Annotated[Path, tyro.conf.arg(aliases=("-o",))],
    best: bool = False,
    opset: int | None = None,
) -> None:
    """Export the deterministic policy (observation network + policy mean, mapped onto the task's action
    bounds) for use without dmpo.

    Args:
      target: a run directory or a snapshot file.
      format: onnx (needs the export extra: pip install 'dmpo[export]') or stablehlo (jax.export; its
        metadata goes to OUTPUT.json).
      output: file to write.
      best: export snapshots/best.msgpack (the best-evaluated policy) instead of the latest.
      opset: ONNX opset to write (default: jax2onnx's own); onnx only.
    """
    from dmpo.policies.export import ExportError, export_policy

    try:
        path = export_policy(target, output, format, best=best, opset=opset)
    except (ExportError, OSError) as error:
        _fail(str(error))
    print(f"wrote {path}")


def _check_flags_known(args: list[str], commands: dict) -> None:
    """A mistyped option fails in one line naming the closest flags (tyro's own panel ranks them by
    another measure and lists a screenful)."""
    if not args or args[0] not in commands:
        return
    known = known_flags(commands[args[0]])
    message = unknown_flag_message(args[1:], known, args[0]) if known else None
    if message:
        _fail(message)


@contextlib.contextmanager
def _one_line_warnings():
    """dmpo's own warnings (a checkpoint moved aside, a missing plot column) as `dmpo: warning: ...`
    lines, like the CLI's other warnings, instead of Python's two-line form with a source line."""
    package = str(Path(__file__).resolve().parents[1])
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if str(filename).startswith(package):
            print(f"dmpo: warning: {message}", file=file or sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def main(argv: list[str] | None = None) -> None:
    with _one_line_warnings():
        _run_command(argv)


def _run_command(argv: list[str] | None) -> None:
    # dm_control probes GLFW on import and warns on headless machines even when nothing renders.
    warnings.filterwarnings("ignore", message=".*DISPLAY environment variable is missing")
    args = list(sys.argv[1:] if argv is None else argv)
    resume, preset = _resume_argument(args), _preset_argument(args)
    if resume is not None and preset is not None:
        _fail(f"--preset {preset} with --resume {resume}: a resumed run keeps the config it was saved "
              "with; give only --resume")
    if preset == "default":  # the name the preset `control` had until `fast` became the default
        _fail("--preset default: no preset has that name since `fast` became the default; give --preset "
              "fast (the default), control (the earlier default) or reference")
    try:
        # With --resume (or --preset), the flags given are parsed on top of the saved config (or the
        # preset's), so that exactly those flags count (`_apply_resume_flags` checks which may change).
        if resume is not None:
            train_command = functools.partial(train, config=_saved_config(resume))
        elif preset in AGENT_PRESETS:  # an unknown name is left to tyro, which lists the choices
            train_command = functools.partial(train, config=TrainConfig(agent=AGENT_PRESETS[preset]()))
        else:
            train_command = train
        from dmpo.sweeps.command import split_train_flags, sweep

        args, sweep_train_flags = split_train_flags(args) if args[:1] == ["sweep"] else (args, ())
        commands = {"train": train_command, "eval": evaluate, "plot": plot, "export": export,
                    "check-env": check_env, "sweep": functools.partial(sweep, train_flags=sweep_train_flags)}
        _check_flags_known(args, commands)
        with parsing_flags():  # a bad value is reported below, naming its flag, not in tyro's panel
            tyro.extras.subcommand_cli_from_dict(
                commands,
                args=args,
                description="Distributional MPO (DMPO) for continuous control.",
            )
    except ParsedConfigError as error:
        _fail(flag_message(error.error))
    except ConfigError as error:
        _fail(str(error))


