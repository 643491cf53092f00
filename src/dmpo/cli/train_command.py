"""`dmpo train`: the flags, `--resume` and `--preset`, the checks before any work, and the messages of
a `Run` (`dmpo.run.run`, which owns the run's sequence in both modes and picks the mode).

    dmpo train --env dmc:cartpole-swingup --steps 100000 --seed 0
    dmpo train --resume runs/20261202-120000 --steps 200000   (extend a run)
    dmpo train --actors 4 --env dmc:walker-walk                 (on a private local Ray cluster)

Every option comes from `dmpo.config.TrainConfig` (nested: `--agent.batch-size`,
`--agent.learner.discount`, ...); `dmpo train --help` lists them with their defaults.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from dmpo.cli.flags import fail, one_line_args
from dmpo.config import ConfigError, TrainConfig
from dmpo.lifecycle.resume import RESUMABLE_FIELDS
from dmpo.utils.install import install_hint


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
    max_node_restarts: int | None = None,
    node_restart_deadline: float | None = None,
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
      max_node_restarts: with --actors: how many times in all a lost learner, replay node or counter is
        recovered inside the run, from the newest checkpoint (default 3; 0: the first loss ends the run
        failed, to be continued with --resume).
      node_restart_deadline: with --actors: seconds a recovery waits for the cluster to hold the lost
        node again (a machine to join; default 600); past it the run ends interrupted at its newest
        checkpoint and the command exits 75, for a scheduler to requeue it with --resume.
    """
    from dmpo.config import flags_parsed
    from dmpo.lifecycle.interrupts import exit_code, message
    from dmpo.lifecycle.lock import RunLockedError
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
    _check_recovery_flags(config, max_node_restarts, node_restart_deadline)
    if resume is not None and run_dir is not None and Path(run_dir) != Path(resume):
        fail("--run-dir and --resume name different directories; give only --resume RUN_DIR")
    # A malformed JSON flag fails before anything starts (without the flags, Ray is not imported here).
    cluster = _cluster_settings(config, ray_address, resources, stop_timeout, keep_ray_logs,
                                max_node_restarts, node_restart_deadline)
    try:
        check_installed(config.track)  # a missing tracker package: one line, before anything starts
    except ConfigError as error:
        fail(str(error))
    _check_before_training(config)
    try:
        summary = _train(config, resume if resume is not None else run_dir, resume=resume is not None,
                         progress=progress, cluster=cluster)
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


# The --resume help names the fields the resume rules let change, from the one list of them; each
# option's help is one line, which the terminal wraps (`one_line_args`).
train.__doc__ = one_line_args(train.__doc__.replace(
    "RESUMABLE_FLAGS", ", ".join("--" + name.replace("_", "-") for name in RESUMABLE_FIELDS)))


def _check_recovery_flags(config: TrainConfig, max_node_restarts: int | None,
                          node_restart_deadline: float | None) -> None:
    for flag, value in (("--max-node-restarts", max_node_restarts),
                        ("--node-restart-deadline", node_restart_deadline)):
        if value is not None and not config.actors:
            fail(f"{flag} bounds the recoveries of Ray nodes; it needs --actors N (N >= 1)")
    if max_node_restarts is not None and max_node_restarts < 0:
        fail(f"--max-node-restarts must be an integer >= 0, got {max_node_restarts}")
    if node_restart_deadline is not None and not node_restart_deadline >= 0:
        fail(f"--node-restart-deadline must be >= 0 seconds, got {node_restart_deadline}")


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


def _train(config: TrainConfig, run_dir: Path | None, *, resume: bool, progress: bool, cluster: Any) -> dict:
    """The run: opened (a resume's plan said in lines), then trained; an error is one line."""
    from dmpo.envs import EnvError
    from dmpo.lifecycle.resume import ResumeError
    from dmpo.run.run import Run
    from dmpo.utils.checkpointing import CheckpointError

    usage_errors: tuple[type[BaseException], ...] = (EnvError, FileNotFoundError, FileExistsError,
                                                     CheckpointError, ConfigError)
    run_errors: tuple[type[BaseException], ...] = ()
    if config.actors:
        from dmpo.distributed import NodeFailure, PlacementError, RunSuspended
        from dmpo.run.distributed.cluster import ClusterError

        usage_errors, run_errors = (*usage_errors, PlacementError), (NodeFailure, ClusterError, RunSuspended)
    run = Run(config, run_dir, resume=resume, progress=progress, cluster=cluster)
    try:
        plan = run.open()
        if plan is not None:
            _say_plan(plan)
        return run.train()
    except ResumeError as error:
        fail(str(error))  # it names the run and the reason
    except usage_errors as error:
        fail(str(error))
    except run_errors as error:  # after start-up: run.json says "failed" with the same line
        print(f"dmpo: error: {error}", file=sys.stderr)
        if type(error).__name__ in ("NodeFailure", "RunSuspended"):
            print(f"dmpo: continue with: dmpo train --resume {run.path}", file=sys.stderr)
        # 75 (EX_TEMPFAIL): the run stopped at a checkpoint for want of a machine; requeue it.
        raise SystemExit(75 if type(error).__name__ == "RunSuspended" else 1) from error
    finally:
        run.close()
    raise AssertionError("unreachable")


def _say_plan(plan: Any) -> None:
    """The lines of a resume: nothing to do (exit 0), skipped checkpoints, the changed settings."""
    if plan.nothing_to_do:  # nothing to train: change nothing
        print(f"{plan.run_dir} already reached {plan.reached} env steps (steps {plan.config.steps}); nothing "
              f"to do. Pass --steps with a larger number to extend it.")
        raise SystemExit(0)
    if plan.only_final_events:
        print(f"resume: {plan.run_dir} reached {plan.reached} env steps (steps {plan.config.steps}) but "
              f"ended {plan.status}: writing its final events that are missing, without training",
              file=sys.stderr)
    for warning in plan.warnings:
        print(f"dmpo: warning: {warning}", file=sys.stderr)
    warnings.filterwarnings("ignore", message="skipping unusable checkpoint")  # said once, above
    if plan.checkpoint is not None:  # the skipped ones are moved aside at the next save: said once, above
        from dmpo.lifecycle.checkpoints import TrainingCheckpoints

        paths = [path.name for path in TrainingCheckpoints(Path(plan.run_dir) / "checkpoints").paths()]
        newer = paths[paths.index(plan.checkpoint.name) + 1:] if plan.checkpoint.name in paths else []
        for skipped in newer:
            warnings.filterwarnings("ignore", message=rf"checkpoint .*{re.escape(skipped)} is unusable")
    for name, (old, new) in plan.changes.items():
        print(f"resume: {name} {old} -> {new}", file=sys.stderr)
    if plan.from_scratch:
        print(f"resume: {plan.run_dir} has no checkpoint yet; training starts again from step 0 with its "
              "saved config", file=sys.stderr)


def _cluster_settings(config: TrainConfig, ray_address: str | None, resources: dict[str, str | None],
                      stop_timeout: float | None, keep_ray_logs: bool,
                      max_node_restarts: int | None = None,
                      node_restart_deadline: float | None = None) -> Any:
    """The Ray settings of `--actors N` (None for one process); Ray missing is one line."""
    if not config.actors:
        return None
    try:  # Ray is an extra: the single-process path never imports it
        import ray  # noqa: F401

        from dmpo.run.distributed.options import ProgramOptions
    except ImportError:
        fail(f"--actors needs Ray, which is not installed; install it with: {install_hint('distributed')}")
    from dmpo.run.run import ClusterSettings

    placement: dict[str, Any] = _parse_resources(resources) if any(resources.values()) else {}
    if stop_timeout is not None:
        placement["stop_timeout_seconds"] = float(stop_timeout)
    if max_node_restarts is not None:
        placement["max_node_restarts"] = int(max_node_restarts)
    if node_restart_deadline is not None:
        placement["node_restart_deadline_seconds"] = float(node_restart_deadline)
    return ClusterSettings(address=ray_address, options=ProgramOptions(**placement) if placement else None,
                           keep_ray_logs=keep_ray_logs)


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


def _parse_resources(flags: dict[str, str | None]) -> dict[str, dict[str, float] | None]:
    """`--actor-resources '{"worker": 1}'` and co.: JSON objects of resource name -> amount >= 0."""
    import json

    from dmpo.run.distributed.options import valid_resources

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
