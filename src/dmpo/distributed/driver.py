"""`run_distributed`: the driver's loop around a `DistributedProgram` (start, poll, stop).

It starts (or joins) the Ray cluster, starts the program, polls it about once a second while a
progress line shows the shared counts and the evaluator's latest return, and always stops the
program — after a step limit, a node failure or Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmpo.agent.builder import NetworkFactory
from dmpo.config import TrainConfig
from dmpo.distributed.cluster import ray_cluster
from dmpo.distributed.options import DistributedResult, ProgramOptions
from dmpo.distributed.program import DistributedProgram
from dmpo.envs.registry import EnvironmentFactory
from dmpo.lifecycle.callbacks import Callback
from dmpo.lifecycle.interrupts import (
    annotate,
    critical,
    interrupt_on_signals,
    starting_up,
    training_started,
    when_abandoned,
)
from dmpo.lifecycle.lock import run_lock
from dmpo.reporting.trackers import without_secrets


def run_distributed(
    config: TrainConfig,
    run_dir: str | Path,
    *,
    env_factory: EnvironmentFactory | None = None,
    network_factory: NetworkFactory | None = None,
    options: ProgramOptions | None = None,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    progress: bool = True,
    resume: bool = False,
    on_poll: Callable[[DistributedProgram], None] | None = None,
    callbacks: Sequence[Callback] = (),
    keep_ray_logs: bool = False,
) -> DistributedResult:
    """Trains DMPO with `config.actors` acting nodes on Ray for `config.steps` environment steps.

    Args:
      config: the run (module docstring: every field means what it means in one process).
      run_dir: the run directory (config, logs, checkpoints); created if needed.
      env_factory: `factory(seed) -> dm_env.Environment` for every acting node (default: the
        config's task); each node calls it with its own seed.
      network_factory: `factory(env_spec) -> DMPONetworks` for every node (default: the config's).
      options: layout settings and optional wall-clock periods.
      ray_address: join this cluster; None starts a private local cluster (localhost only) and stops
        it at the end. If Ray is already initialised in this process, that cluster is used.
      num_cpus: CPUs of the private local cluster (None: all).
      progress: show the progress line on the driver.
      resume: continue the run in `run_dir` from its latest checkpoint.
      on_poll: called with the program after every monitoring pass (tools and tests).
      callbacks: `dmpo.lifecycle.callbacks.Callback`s, called in this process (evaluations, checkpoints, end).
      keep_ray_logs: keep a private cluster's session files (Ray's logs) after the run; by default its
        `dmpo-ray-*` folder is removed when the cluster stops.

    Returns:
      A `DistributedResult`. Raises `PlacementError` before any node starts when the cluster cannot
      hold them all; `NodeFailure` when the learner, replay or counter node dies (after stopping
      everything); an actor's or the evaluator's own exception (e.g. `EnvError`) when it failed the
      same way twice in a row; re-raises KeyboardInterrupt after writing a final checkpoint.
    """
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    # One process per run directory (dmpo.lifecycle.lock), taken before the program reads the checkpoints;
    # SIGTERM/SIGHUP act as Ctrl-C, and one that comes while Ray starts waits until the nodes are
    # started (dmpo.lifecycle.interrupts). The private cluster is shut down on every way out.
    abandoned = functools.partial(_set_status, Path(run_dir), "interrupted",
                                  "exited at once on a third Ctrl-C")
    program: DistributedProgram | None = None
    with run_lock(run_dir), interrupt_on_signals(), when_abandoned(abandoned), starting_up():
        try:
            program = DistributedProgram(config, run_dir=run_dir, options=options, env_factory=env_factory,
                                         network_factory=network_factory, resume=resume, callbacks=callbacks)
            with contextlib.ExitStack() as stack:
                with without_secrets():  # Ray's processes inherit the environment they are started from
                    stack.enter_context(ray_cluster(ray_address, num_cpus=num_cpus, keep_files=keep_ray_logs))
                stack.enter_context(interrupt_on_signals())  # Ray installs its own handler
                return _drive(program, progress, on_poll)
        except KeyboardInterrupt as error:
            if program is not None and getattr(error, "run_dir", None) is None:  # while Ray shut down
                _set_status(Path(run_dir), "interrupted", None)
                annotate(error, int(program.counts.get("actor_steps", 0)), run_dir)
            raise
        except BaseException as error:  # before the program started: the run says why (see _drive)
            _set_status(Path(run_dir), "failed", f"{type(error).__name__}: {error}".splitlines()[0],
                        only_if=("starting", "running"))
            raise


def _set_status(run_dir: Path, status: str, reason: str | None, only_if: tuple[str, ...] = ()) -> None:
    """run.json's status, where there is a run.json (and its status is one of `only_if`, if given)."""
    from dmpo.lifecycle.directory import RunDirectory

    if not run_dir.joinpath("run.json").is_file():
        return
    run = RunDirectory(run_dir)
    with contextlib.suppress(OSError, ValueError):
        if not only_if or run.info().get("status") in only_if:
            run.set_status(status, reason=reason)  # type: ignore[arg-type]


def _drive(program: DistributedProgram, progress: bool,
           on_poll: Callable[[DistributedProgram], None] | None) -> DistributedResult:
    from dmpo.reporting.progress import Progress

    status, reason = "failed", None
    interrupt: KeyboardInterrupt | None = None
    # As in one process: the live line only with `progress`, evaluation lines always.
    bar = Progress(program.config.steps, live=progress)
    shown = _Shown()
    try:
        program.start()
        training_started()  # a signal that came while Ray and the nodes started stops the run here
        with bar:
            while not program.poll():
                _show(program, bar, shown)
                if on_poll is not None:
                    on_poll(program)
                time.sleep(program.options.poll_seconds)
            _show(program, bar, shown)
        status = "finished"
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM, SIGHUP
        status, interrupt = "interrupted", error
        raise
    except BaseException as error:
        reason = f"{type(error).__name__}: {error}".splitlines()[0]
        raise
    finally:
        try:
            with critical():  # a signal now waits for the nodes' stop (the final checkpoint)
                result = program.stop(status, reason)
        except KeyboardInterrupt as late:  # it came during the stop: the run ends interrupted
            if status == "finished":
                _set_status(program.run_dir, "interrupted", None)
            interrupt = late
        if interrupt is not None:
            annotate(interrupt, int(result.counts.get("actor_steps", 0)), program.run_dir)
            if interrupt is not sys.exc_info()[1]:
                raise interrupt
    # The final evaluation round runs while the program stops.
    _show_rounds(program, bar, shown, [value for _, value in result.evaluator_returns][shown.episodes:])
    return result


class _Shown:
    """How many evaluation episodes and rounds the driver has printed."""

    def __init__(self) -> None:
        self.episodes = 0
        self.rounds = 0


def _show_rounds(program: DistributedProgram, bar: Any, shown: _Shown, returns: list[float]) -> None:
    """Prints each complete round of `eval_episodes` returns as one evaluation line."""
    per_round = max(program.config.eval_episodes, 1)
    while len(returns) >= per_round:
        steps = program.evaluation_steps
        bar.evaluation(steps[shown.rounds] if shown.rounds < len(steps) else None, returns[:per_round])
        shown.rounds += 1
        shown.episodes += per_round
        returns = returns[per_round:]


def _show(program: DistributedProgram, bar: Any, shown: _Shown) -> None:
    """Updates the status line from the shared counts and prints finished evaluation rounds."""
    counts = program.counts
    returns = program.evaluation_returns_since(shown.episodes)
    if returns:
        _show_rounds(program, bar, shown, returns)
    returns, program.episode_returns[:] = list(program.episode_returns), []
    for value in returns[:-1]:  # each episode's return, as one process records them
        bar.update(last_return=value)
    bar.update(env_steps=int(counts.get("actor_steps", 0)), episodes=int(counts.get("actor_episodes", 0)),
               last_return=returns[-1] if returns else None,
               learner_steps=int(counts.get("learner_steps", 0)))
