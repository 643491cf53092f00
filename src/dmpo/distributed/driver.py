"""`run_distributed`: the driver's loop around a `DistributedProgram` (start, poll, stop).

It starts (or joins) the Ray cluster, starts the program, polls it about once a second while a
progress line shows the shared counts and the evaluator's latest return, and always stops the
program — after a step limit, a node failure or Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmpo.builder import NetworkFactory
from dmpo.callbacks import Callback
from dmpo.config import TrainConfig
from dmpo.distributed.cluster import ray_cluster
from dmpo.distributed.options import DistributedResult, ProgramOptions
from dmpo.distributed.program import DistributedProgram
from dmpo.envs.registry import EnvironmentFactory
from dmpo.lifecycle.interrupts import annotate, interrupt_on_signals
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
      callbacks: `dmpo.callbacks.Callback`s, called in this process (evaluations, checkpoints, end).
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
    # SIGTERM/SIGHUP act as Ctrl-C (dmpo.lifecycle.interrupts), entered again once Ray has installed its own.
    with run_lock(run_dir), interrupt_on_signals():
        program = DistributedProgram(config, run_dir=run_dir, options=options, env_factory=env_factory,
                                     network_factory=network_factory, resume=resume, callbacks=callbacks)
        with contextlib.ExitStack() as stack:
            with without_secrets():  # Ray's processes inherit the environment they are started from
                stack.enter_context(ray_cluster(ray_address, num_cpus=num_cpus, keep_files=keep_ray_logs))
            stack.enter_context(interrupt_on_signals())
            return _drive(program, progress, on_poll)


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
        result = program.stop(status, reason)
        if interrupt is not None:
            annotate(interrupt, int(result.counts.get("actor_steps", 0)), program.run_dir)
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
