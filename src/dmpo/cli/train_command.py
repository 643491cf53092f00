"""`dmpo train`: the flags, `--resume` and `--preset`, the checks before any work, and the hand-over
to the single-process trainer (`dmpo.run.local`) or the distributed program (`dmpo.distributed`).

    dmpo train --env dmc:cartpole-swingup --steps 100000 --seed 0
    dmpo train --resume runs/20261202-120000 --steps 200000   (extend a run)
    dmpo train --actors 4 --env dmc:walker-walk                 (on a private local Ray cluster)

Every option comes from `dmpo.config.TrainConfig` (nested: `--agent.batch-size`,
`--agent.learner.discount`, ...); `dmpo train --help` lists them with their defaults.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Annotated, Literal

import tyro

from dmpo.cli.flags import fail
from dmpo.config import ConfigError, TrainConfig

# Settings that may differ on `--resume` (a longer budget, other periods, more actors); any other
# difference from the saved config would not match the checkpoint (networks, env, agent) and is refused.
RESUMABLE_FIELDS = ("steps", "eval_every", "eval_episodes", "checkpoint_every", "keep_checkpoints", "actors",
                    "stop_at_return", "video_every")


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
        one update per 2 env steps on batches of 128 and a 256-256-256 critic, the only preset to reach
        a good policy on every task of the time-to-score benchmark), control (`control_suite_preset()`: the
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
        fail("--actor-resources, --learner-resources and --replay-resources place Ray nodes; they need "
              "--actors N (N >= 1)")
    if keep_ray_logs and (not config.actors or ray_address is not None):
        fail("--keep-ray-logs keeps the files of the private Ray cluster that --actors N starts; "
              + ("it needs --actors N (N >= 1)" if not config.actors else
                 "with --ray-address the cluster's files are where its `ray start` put them"))
    if stop_timeout is not None and not config.actors:
        fail("--stop-timeout bounds the stop of the Ray nodes; it needs --actors N (N >= 1) (one process "
              "writes its final checkpoint itself, however long it takes)")
    if stop_timeout is not None and not stop_timeout > 0:
        fail(f"--stop-timeout must be a number of seconds > 0, got {stop_timeout}")
    # A malformed JSON flag fails before anything starts (without the flags, Ray is not imported here).
    placement = _parse_resources(resources) if any(resources.values()) else None
    if stop_timeout is not None:
        placement = {**(placement or {}), "stop_timeout_seconds": float(stop_timeout)}
    try:
        check_installed(config.track)  # a missing tracker package: one line, before anything starts
    except ConfigError as error:
        fail(str(error))
    try:
        with contextlib.ExitStack() as stack:
            if resume is not None:
                if run_dir is not None and Path(run_dir) != Path(resume):
                    fail("--run-dir and --resume name different directories; give only --resume RUN_DIR")
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
        fail(str(error))
    except TrackerError as error:  # the run folder says "failed" with the same line
        print(f"dmpo: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as error:  # a file-system problem (permissions, full disk): the message names the path
        fail(str(error))
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
        from dmpo.agent.builder import environment_factory
        from dmpo.envs import EnvError
        from dmpo.lifecycle.videos import check_can_film

        try:  # e.g. gym classic-control tasks without pygame: said now, not at the first video
            check_can_film(environment_factory(config), config.seed)
        except EnvError as error:
            fail(f"--video-every {config.video_every}: {error}")


def _train(config: TrainConfig, run_dir: Path | None, *, resume: bool, progress: bool,
           ray_address: str | None, resources: dict | None = None, keep_ray_logs: bool = False) -> dict:
    from dmpo.utils.checkpointing import CheckpointError

    if config.pixels:
        os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is first imported
    if config.actors:
        return _train_distributed(config, run_dir, resume=resume, progress=progress,
                                  ray_address=ray_address, resources=resources, keep_ray_logs=keep_ray_logs)
    from dmpo.envs import EnvError
    from dmpo.run.local import train as train_locally

    try:
        return train_locally(config, run_dir, resume=resume, progress=progress)
    except (EnvError, FileNotFoundError, FileExistsError, CheckpointError) as error:
        fail(str(error))
        raise AssertionError("unreachable") from error


def resume_argument(args: list[str]) -> Path | None:
    """The RUN of `train ... --resume RUN` (or `--resume=RUN`) in raw arguments, else None."""
    if not args or args[0] != "train":
        return None
    for index, arg in enumerate(args):
        if arg == "--resume" and index + 1 < len(args):
            return Path(args[index + 1])
        if arg.startswith("--resume="):
            return Path(arg.partition("=")[2])
    return None


def preset_argument(args: list[str]) -> str | None:
    """The NAME of `train ... --preset NAME` (or `--preset=NAME`) in raw arguments, else None."""
    if not args or args[0] != "train":
        return None
    for index, arg in enumerate(args):
        if arg == "--preset" and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--preset="):
            return arg.partition("=")[2]
    return None


def saved_run_config(run: Path) -> TrainConfig:
    from dmpo.lifecycle.directory import RunDirectory

    try:
        return RunDirectory.open(run).load_config(TrainConfig)
    except (FileNotFoundError, ConfigError, ValueError) as error:
        fail(f"--resume {run}: {error}")
        raise AssertionError("unreachable") from error


def _apply_resume_flags(resume: Path, config: TrainConfig) -> TrainConfig:
    """The config to resume with: the saved one with the flags given now applied (`main` parses
    them on top of the saved config), by the library's resume rules (`dmpo.lifecycle.resume`): a
    refused change or an unusable newest checkpoint is one line, before anything is built."""
    from dmpo.lifecycle.resume import ResumeError, apply_resume, plan_resume

    try:
        plan = plan_resume(resume, config)
    except ResumeError as error:
        fail(str(error))  # it names the run and the reason
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
        fail("--actors needs Ray, which is not installed; install it with: pip install 'dmpo[distributed]'")

    parsed = {}
    for name, text in flags.items():
        flag = "--" + name.replace("_", "-")
        try:
            value = None if text is None else json.loads(text)
        except json.JSONDecodeError as error:
            fail(f"{flag} must be a JSON object of Ray resource names and amounts, e.g. "
                  f"'{{\"worker\": 1}}'; got {text!r} ({error.msg})")
        if not valid_resources(value):
            fail(f"{flag} must map custom Ray resource names (not CPU/GPU) to amounts >= 0, e.g. "
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
        fail("--actors needs Ray, which is not installed; install it with: "
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
            fail(str(error))
        run_dir = Path(run_dir) if run_dir is not None else new_run_path()
        try:  # the run directory records the whole TrainConfig, so that --resume can rebuild it
            RunDirectory.create(run_dir, config, seed=config.seed)
        except (FileExistsError, ConfigError) as error:
            fail(str(error))
    try:
        result = run_distributed(config, run_dir, ray_address=ray_address, progress=progress, resume=resume,
                                 options=ProgramOptions(**(resources or {})), keep_ray_logs=keep_ray_logs)
    except (FileNotFoundError, CheckpointError, PlacementError) as error:
        fail(str(error))
    except EnvError as error:  # an environment that failed the same way twice: as in one process
        fail(str(error))
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
