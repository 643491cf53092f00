"""The `dmpo` command: `train`, `eval`, `plot`, `export`, `check-env` and `sweep`.

    dmpo train --env dmc:cartpole-swingup --steps 100000 --seed 0
    dmpo train --resume runs/20261202-120000 --steps 200000   (extend a run)
    dmpo eval runs/20261202-120000 --episodes 10 --video cartpole.mp4
    dmpo plot runs/a runs/b -o curves.png
    dmpo check-env my_pkg.envs:make_env          (what the agent will see, or why it cannot learn it)
    dmpo export runs/20261202-120000 --format onnx -o policy.onnx
    dmpo sweep sweeps/ns --seeds 0 1 2 --grid agent.learner.num-samples=10,20 -- --env dmc:walker-walk

`train` lives in `dmpo.cli.train_command`; every one of its options comes from `dmpo.config.TrainConfig`
(nested: `--agent.batch-size`, `--agent.learner.discount`, ...), and `dmpo train --help` lists them with
their defaults.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dmpo.cli.flags import fail, flag_message, known_flags, reflow_help, unknown_flag_message
from dmpo.cli.train_command import RESUMABLE_FIELDS, preset_argument, resume_argument, saved_run_config, train
from dmpo.config import AGENT_PRESETS, ConfigError, ParsedConfigError, TrainConfig, parsing_flags

__all__ = ["RESUMABLE_FIELDS", "check_env", "evaluate", "export", "main", "plot", "train"]


def _check_output(flag: str, path: Path) -> None:
    """An output file's folder exists and can be written, or one line naming it, before any work."""
    folder = path.resolve().parent
    if not folder.is_dir():
        fail(f"{flag} {path}: the folder {folder} does not exist")
    if path.is_dir():
        fail(f"{flag} {path} is a folder; name a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"{flag} {path}: cannot write to the folder {folder} (permission denied)")


def _check_spec_matches(trained: object, environment: object, name: str) -> None:
    """The policy was trained on observations and actions of these shapes, or a clear error."""
    import jax

    from dmpo.envs import EnvError, make_environment_spec

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
        fail(f"--episodes must be a positive integer, got {episodes}")
    if video is not None and video.suffix.lower() not in (".mp4", ".gif"):
        fail(f"--video must name a .mp4 or .gif file, got {str(video)!r}")
    if video is not None:
        _check_output("--video", video)
    from dmpo.agent.environment_loop import evaluate as run_evaluation
    from dmpo.agent.policies.snapshot import SnapshotError, load_policy
    from dmpo.envs import EnvError, make

    if best:
        if not target.is_dir():
            fail(f"--best needs a run directory, got the file {target}")
        target = target / "snapshots" / "best.msgpack"
        if not target.is_file():
            fail(f"--best: {target} does not exist (the run has not evaluated yet, or evaluates with "
                  "eval_every 0)")
    try:
        policy = load_policy(target)
    except (SnapshotError, OSError) as error:
        fail(str(error))
    meta = policy.metadata
    name = env or meta.get("env")
    if not name:
        fail("the snapshot does not name its environment; pass --env")
    if meta.get("pixels") or video is not None:
        os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is first imported
    try:
        environment = make(name, seed=seed, pixels=bool(meta.get("pixels")),
                           action_repeat=meta.get("action_repeat"), render=video is not None)
        _check_spec_matches(policy.environment_spec, environment, name)
        from dmpo.lifecycle.videos import camera_render_fn, parse_camera

        # The environment from `make` maps canonical actions onto the task's bounds itself.
        result = run_evaluation(environment, policy.canonical_action, episodes, video_path=video,
                                render_fn=camera_render_fn(parse_camera(camera)))
    except (EnvError, OSError, ValueError, TypeError) as error:  # one line, not a traceback
        fail(f"eval {target} on {name}: {error}")
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
        fail("give at least one run directory")
    group_by = None
    if any((run / "sweep.json").is_file() for run in runs):  # a sweep folder: one curve per grid point
        if len(runs) > 1:
            fail("give one sweep folder, or run directories")
        folder, runs = runs[0], tuple(sweep_runs(runs[0]))
        if not runs:
            fail(f"the sweep {folder} has no trial with an evaluation yet")
        group_by = _grid_point
    _check_output("--output", output)
    y = y or ("return_mean" if label == "evaluator" else "episode_return")
    if smooth < 1:
        fail(f"--smooth must be a positive integer, got {smooth}")
    try:
        path = plot_runs(list(runs), output, x=x, y=y, label_source=label, spread=band, smoothing=smooth,
                         per_seed=per_seed, title=title, group_by=group_by)
    except (OSError, ValueError, KeyError) as error:  # OSError: its message names the path
        fail(str(error))
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
        fail(f"--steps must be a positive integer, got {steps}")
    if pixels:
        os.environ.setdefault("MUJOCO_GL", "egl")
    from dmpo.envs import EnvError, TaskFactory
    from dmpo.envs.checks import check_environment

    try:
        report = check_environment(TaskFactory(env, pixels=pixels, action_repeat=action_repeat), steps=steps,
                                   seed=seed, observation_network=observation_network, name=env)
    except EnvError as error:
        fail(str(error) if str(error).startswith(env) else f"{env}: {error}")
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
      format: onnx (needs the export extra: pip install 'dmpo-jax[export]', from a checkout
        pip install -e '.[export]') or stablehlo (jax.export; its metadata goes to OUTPUT.json).
      output: file to write.
      best: export snapshots/best.msgpack (the best-evaluated policy) instead of the latest.
      opset: ONNX opset to write (default: jax2onnx's own); onnx only.
    """
    from dmpo.agent.policies.export import ExportError, export_policy

    try:
        path = export_policy(target, output, format, best=best, opset=opset)
    except (ExportError, OSError) as error:
        fail(str(error))
    print(f"wrote {path}")


def _check_flags_known(args: list[str], commands: dict) -> None:
    """A mistyped option fails in one line naming the closest flags (tyro's own panel ranks them by
    another measure and lists a screenful)."""
    if not args or args[0] not in commands:
        return
    known = known_flags(commands[args[0]])
    message = unknown_flag_message(args[1:], known, args[0]) if known else None
    if message:
        fail(message)


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
    reflow_help()
    with _one_line_warnings():
        _run_command(argv)


def _run_command(argv: list[str] | None) -> None:
    # dm_control probes GLFW on import and warns on headless machines even when nothing renders.
    warnings.filterwarnings("ignore", message=".*DISPLAY environment variable is missing")
    args = list(sys.argv[1:] if argv is None else argv)
    resume, preset = resume_argument(args), preset_argument(args)
    if resume is not None and preset is not None:
        fail(f"--preset {preset} with --resume {resume}: a resumed run keeps the config it was saved "
              "with; give only --resume")
    if preset == "default":  # the name the preset `control` had until `fast` became the default
        fail("--preset default: no preset has that name since `fast` became the default; give --preset "
              "fast (the default), control (the earlier default) or reference")
    try:
        # With --resume (or --preset), the flags given are parsed on top of the saved config (or the
        # preset's), so that exactly those flags count (`_apply_resume_flags` checks which may change).
        if resume is not None:
            train_command = functools.partial(train, config=saved_run_config(resume))
        elif preset in AGENT_PRESETS:  # an unknown name is left to tyro, which lists the choices
            train_command = functools.partial(train, config=TrainConfig(agent=AGENT_PRESETS[preset]()))
        else:
            train_command = train
        from dmpo.cli.sweep_command import split_train_flags, sweep

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
        fail(flag_message(error.error))
    except ConfigError as error:
        fail(str(error))


