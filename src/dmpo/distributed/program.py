"""The distributed program: build the nodes on Ray, watch them, stop them (spec §7).

    result = run_distributed(config, "dmc:cartpole-swingup", num_actors=4, run_dir="runs/x", seed=0,
                             max_actor_steps=1_000_000)

`DistributedProgram` does the work in three calls — `start()`, `poll()` (one monitoring pass, the
driver's loop calls it about once a second) and `stop()` — so tests and tools can act between
passes; `run_distributed` is the loop around it, inside `cluster.ray_cluster`.

Monitoring, per pass: the learner's and the replay node's health (a dead one stops the program with
`NodeFailure`, never leaving the actors to run alone); finished or failed `run()` calls of the actors
(a dead actor is replaced by a new one with a new seed, up to `max_actor_restarts` in all) and of the
evaluator; the counter totals for the progress line and the `max_actor_steps` stop; a snapshot of the
replay table's counters (kept in the result, so the rate limiter's behaviour can be inspected).

Stopping: actors and evaluator are asked to stop, the learner finishes its step and writes a final
checkpoint, the actors flush their writers and counts, the replay table is closed, every node is
killed. On a cluster this call started, Ray itself is then shut down.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from dmpo.config import DMPOConfig
from dmpo.distributed.actor import make_actor_node
from dmpo.distributed.cluster import ray_cluster
from dmpo.distributed.common import (
    EnvironmentFactory,
    NetworkFactory,
    NodeSettings,
    make_environment,
    node_seed,
)
from dmpo.distributed.counter_service import RemoteCounterService
from dmpo.distributed.evaluator import make_evaluator_node
from dmpo.distributed.learner_node import make_learner_node
from dmpo.distributed.options import DistributedResult, NodeFailure, ProgramOptions
from dmpo.distributed.replay_service import ReplayServiceConfig, make_rate_limiter, make_replay_service
from dmpo.types import make_environment_spec

_ROLE_ACTOR, _ROLE_EVALUATOR, _ROLE_LEARNER, _ROLE_REPLAY = 1, 2, 3, 4


class DistributedProgram:
    """One distributed DMPO run on an initialised Ray cluster (see the module docstring)."""

    def __init__(self, config: DMPOConfig, environment: str | EnvironmentFactory, *, run_dir: str | Path,
                 seed: int = 0, options: ProgramOptions | None = None,
                 network_factory: NetworkFactory | None = None, resume: bool = False,
                 use_gpu: bool | None = None) -> None:
        if not isinstance(config, DMPOConfig):
            raise TypeError(f"config must be a DMPOConfig, got {type(config).__name__}")
        if not (isinstance(environment, str) or callable(environment)):
            raise TypeError(f"environment must be a task name or a factory(is_eval) -> env, "
                            f"got {environment!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an integer, got {seed!r}")
        if network_factory is not None and not callable(network_factory):
            raise TypeError(f"network_factory must be callable(env_spec) -> DMPONetworks, "
                            f"got {network_factory!r}")
        self.config = config
        self.environment = environment
        self.run_dir = Path(run_dir)
        self.seed = seed
        self.options = options or ProgramOptions()
        self.network_factory = network_factory
        self.resume = resume
        self._use_gpu = use_gpu
        self.actor_handles: list[Any] = []
        self._actor_refs: list[Any] = []
        self._actor_generation: list[int] = []
        self._actor_results: list[dict[str, Any]] = []
        self.actor_restarts = 0
        self.learner: Any = None
        self.replay: Any = None
        self.counter: Any = None
        self.evaluator: Any = None
        self._learner_ref: Any = None
        self._evaluator_ref: Any = None
        self._evaluator_returns: list[tuple[int, float]] = []
        self._evaluator_generation = 0
        self.counts: dict[str, Any] = {}
        self.replay_history: list[tuple[float, Any]] = []
        self._learner_result: dict[str, Any] | None = None
        self._started_at: float | None = None
        self._settings: NodeSettings | None = None
        self._run: Any = None
        self._health: dict[str, tuple[Any, float]] = {}  # node -> (pending check, when it was sent)
        self._answered: set[str] = set()
        # Checked here, before any cluster starts: the run directory and the environment.
        self._latest_checkpoint = self._check_run_directory()
        probe = make_environment(environment, is_eval=False, seed=seed)
        self.env_spec = make_environment_spec(probe)
        probe.close()

    def _check_run_directory(self) -> Path | None:
        """The checkpoint to resume from (None for a fresh run); raises if the directory disagrees."""
        from dmpo.runners.checkpoints import TrainingCheckpoints

        checkpoints = self.run_dir / "checkpoints"
        latest = (TrainingCheckpoints(checkpoints, keep=self.options.keep_checkpoints)
                  .latest(verify_contents=self.resume) if checkpoints.is_dir() else None)
        if not self.resume:
            if latest is not None:
                raise FileExistsError(f"{self.run_dir} already holds checkpoints ({latest.name}); pass "
                                      "resume=True to continue that run, or use a new run directory")
            return None
        if not self.run_dir.joinpath("run.json").is_file():
            raise FileNotFoundError(f"cannot resume: {self.run_dir} is not a run directory (no run.json)")
        if latest is None:
            raise FileNotFoundError(f"cannot resume: no checkpoint in {checkpoints}")
        return latest

    # ---------------------------------------------------------------------------------------- start

    def start(self) -> None:
        """Prepares the run directory and starts every node."""
        from dmpo.replay import transition_signature

        self._started_at = time.monotonic()
        replay_path = self._prepare_run_directory()
        env_spec = self.env_spec
        self._settings = NodeSettings(
            config=self.config, environment=self.environment, env_spec=env_spec, run_dir=str(self.run_dir),
            seed=self.seed, network_factory=self.network_factory,
            variable_update_period=self.options.variable_update_period,
            log_time_delta=self.options.log_time_delta)
        opts = self.options
        self.counter = RemoteCounterService.remote()
        replay_config = ReplayServiceConfig(
            max_size=self.config.max_replay_size, rate_limiter=make_rate_limiter(self.config),
            seed=node_seed(self.seed, _ROLE_REPLAY),
            max_concurrent_inserts=opts.num_actors * opts.max_inserts_in_flight + 1,
            max_concurrent_samples=opts.samples_in_flight + 1)
        self.replay = make_replay_service(transition_signature(env_spec), replay_config,
                                          restore_path=replay_path)
        use_gpu = self._use_gpu if self._use_gpu is not None else ray.cluster_resources().get("GPU", 0) >= 1
        self.learner = make_learner_node(
            self._settings, node_seed(self.seed, _ROLE_LEARNER), self.replay, self.counter, use_gpu=use_gpu,
            checkpoint_period_seconds=opts.checkpoint_period_seconds, keep_checkpoints=opts.keep_checkpoints,
            checkpoint_replay=opts.checkpoint_replay, resume=self.resume,
            samples_in_flight=opts.samples_in_flight, publish_interval=opts.variable_publish_seconds)
        self._learner_ref = self.learner.run.remote(opts.max_learner_steps)
        for index in range(opts.num_actors):
            self._actor_generation.append(0)
            self.actor_handles.append(None)
            self._actor_refs.append(None)
            self._start_actor(index)
        if opts.evaluator_period_seconds is not None:
            self._start_evaluator()

    def _prepare_run_directory(self) -> str | None:
        """Creates or opens the run directory; returns the replay file to restore, if any."""
        from dmpo.runs import RunDirectory

        if self.run_dir.joinpath("run.json").is_file():
            self._run = RunDirectory.open(self.run_dir)
        else:
            self._run = RunDirectory.create(self.run_dir, self.config, seed=self.seed, exist_ok=True)
        if self._latest_checkpoint is None:
            return None
        self._run.mark_resumed()
        from dmpo.distributed.common import NODE_LOG_STEP_KEYS
        from dmpo.utils.logging import rewind_logs

        saved = json.loads((self._latest_checkpoint / "state.json").read_text())  # rows past it: logged twice
        for label, key in NODE_LOG_STEP_KEYS.items():
            rewind_logs(self.run_dir, label, key, int(saved["learner_steps" if key == "learner_steps"
                                                         else "env_steps"]))
        replay = self._latest_checkpoint / "replay.npz"
        return str(replay) if self.options.checkpoint_replay and replay.is_file() else None

    def _start_actor(self, index: int) -> None:
        assert self._settings is not None
        generation = self._actor_generation[index]
        handle = make_actor_node(
            self._settings, index, node_seed(self.seed, _ROLE_ACTOR, index, generation), self.learner,
            self.replay, self.counter, persist_logs=index == 0,
            insert_batch_size=self.options.insert_batch_size,
            max_inserts_in_flight=self.options.max_inserts_in_flight)
        self.actor_handles[index] = handle
        self._actor_refs[index] = handle.run.remote()

    def _start_evaluator(self) -> None:
        assert self._settings is not None and self.options.evaluator_period_seconds is not None
        self.evaluator = make_evaluator_node(
            self._settings, node_seed(self.seed, _ROLE_EVALUATOR, 0, self._evaluator_generation),
            self.learner, self.counter, episodes_per_round=self.options.evaluator_episodes,
            period_seconds=self.options.evaluator_period_seconds)
        self._evaluator_ref = self.evaluator.run.remote()

    # ----------------------------------------------------------------------------------------- poll

    def poll(self) -> bool:
        """One monitoring pass (module docstring); True once a step limit is reached."""
        if self._learner_finished():
            return True
        self._check_critical_nodes()
        self._check_actors()
        self._check_evaluator()
        limit = self.options.max_actor_steps
        return limit is not None and self.counts.get("actor_steps", 0) >= limit

    def _learner_finished(self) -> bool:
        ready, _ = ray.wait([self._learner_ref], timeout=0)
        if not ready:
            return False
        try:
            self._learner_result = ray.get(self._learner_ref)
        except Exception as error:
            raise NodeFailure(self._failure_message("learner", error)) from error
        return True

    def _check_critical_nodes(self) -> None:
        """Non-blocking health checks: one outstanding call per node, answered or failed or overdue."""
        checks = {"learner": lambda: self.learner.ping.remote(),
                  "replay": lambda: self.replay.stats.remote(),
                  "counter": lambda: self.counter.get_counts.remote()}
        now = time.monotonic()
        for name, send in checks.items():
            if name not in self._health:
                self._health[name] = (send(), now)
            ref, sent_at = self._health[name]
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                allowed = (self.options.health_timeout_seconds if name in self._answered
                           else self.options.startup_timeout_seconds)
                if now - sent_at > allowed:
                    raise NodeFailure(self._failure_message(name, TimeoutError(
                        f"no answer to a health check for {now - sent_at:.0f} s")))
                continue
            try:
                value = ray.get(ref)
            except Exception as error:
                raise NodeFailure(self._failure_message(name, error)) from error
            self._answered.add(name)
            del self._health[name]
            if name == "replay":
                self.replay_history.append((self.elapsed(), value))
            elif name == "counter":
                self.counts = value

    def _failure_message(self, node: str, error: BaseException) -> str:
        from dmpo.runners.checkpoints import TrainingCheckpoints

        checkpoints = TrainingCheckpoints(self.run_dir / "checkpoints", keep=self.options.keep_checkpoints)
        latest = checkpoints.latest()
        where = (f"the latest checkpoint is {latest}; run again with resume=True to continue from it"
                 if latest is not None else "no checkpoint was written yet")
        return (f"the {node} node failed ({type(error).__name__}: {_first_line(error)}); the distributed "
                f"program was stopped and all its nodes shut down; {where}")

    def _check_actors(self) -> None:
        refs = [ref for ref in self._actor_refs if ref is not None]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        for ref in ready:
            index = self._actor_refs.index(ref)
            self._actor_refs[index] = None
            try:
                self._actor_results.append(ray.get(ref))
            except Exception as error:
                self._replace_actor(index, error)

    def _replace_actor(self, index: int, error: BaseException) -> None:
        if self.actor_restarts >= self.options.max_actor_restarts:
            raise NodeFailure(f"actor {index} failed ({type(error).__name__}: {_first_line(error)}) after "
                              f"{self.actor_restarts} actor restarts (max_actor_restarts); the program "
                              "was stopped") from error
        self.actor_restarts += 1
        _kill(self.actor_handles[index])
        self._actor_generation[index] += 1
        self._start_actor(index)

    def _check_evaluator(self) -> None:
        if self._evaluator_ref is None:
            return
        ready, _ = ray.wait([self._evaluator_ref], timeout=0)
        if not ready:
            return
        try:
            self._evaluator_returns.extend(ray.get(self._evaluator_ref))
            self._evaluator_ref = None
        except Exception as error:
            if self._evaluator_generation >= self.options.max_actor_restarts:
                raise NodeFailure(f"the evaluator failed ({type(error).__name__}: {_first_line(error)}) "
                                  "too often") from error
            _kill(self.evaluator)
            self._evaluator_generation += 1
            self._start_evaluator()

    def latest_evaluation(self) -> tuple[int, int, float] | None:
        """The evaluator's `(episodes so far, learner step, return)`, or None (never waits long)."""
        if self.evaluator is None or self._evaluator_ref is None:
            return None
        try:
            return ray.get(self.evaluator.latest.remote(), timeout=5.0)
        except Exception:
            return None

    def elapsed(self) -> float:
        return 0.0 if self._started_at is None else time.monotonic() - self._started_at

    # ----------------------------------------------------------------------------------------- stop

    def stop(self, status: str = "finished") -> DistributedResult:
        """Stops every node in order (module docstring) and returns the result; safe after a failure."""
        timeout = self.options.stop_timeout_seconds
        for handle in [*self.actor_handles, self.evaluator]:
            _call_quietly(handle, "stop")
        _call_quietly(self.learner, "stop")
        if self._learner_result is None and self._learner_ref is not None:
            self._learner_result = _get_quietly(self._learner_ref, timeout)
        for ref in self._actor_refs:
            result = _get_quietly(ref, timeout)
            if result is not None:
                self._actor_results.append(result)
        if self._evaluator_ref is not None:
            self._evaluator_returns.extend(_get_quietly(self._evaluator_ref, timeout) or [])
        counts = _get_quietly(self.counter.get_counts.remote(), timeout) if self.counter else None
        replay_stats = _get_quietly(self.replay.stats.remote(), timeout) if self.replay else None
        _call_quietly(self.replay, "close")
        for handle in [*self.actor_handles, self.evaluator, self.learner, self.replay, self.counter]:
            _kill(handle)
        if self._run is not None:
            self._run.set_status("finished" if status == "finished" else status)
        return DistributedResult(
            status=status, counts=dict(counts or self.counts), learner=dict(self._learner_result or {}),
            actors=sorted(self._actor_results, key=lambda r: r["index"]), actor_restarts=self.actor_restarts,
            evaluator_returns=list(self._evaluator_returns), replay=replay_stats,
            replay_history=list(self.replay_history), wall_seconds=self.elapsed(), run_dir=str(self.run_dir),
            resumed_from=(self._learner_result or {}).get("resumed_from"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""


def _call_quietly(handle: Any, method: str) -> None:
    if handle is None:
        return
    try:
        getattr(handle, method).remote()
    except Exception:  # the node is already gone
        pass


def _get_quietly(ref: Any, timeout: float) -> Any:
    if ref is None:
        return None
    try:
        return ray.get(ref, timeout=timeout)
    except Exception:
        return None


def _kill(handle: Any) -> None:
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:
        pass


def run_distributed(
    config: DMPOConfig,
    environment: str | EnvironmentFactory,
    *,
    num_actors: int,
    run_dir: str | Path,
    seed: int = 0,
    max_actor_steps: int | None = None,
    max_learner_steps: int | None = None,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    network_factory: NetworkFactory | None = None,
    variable_update_period: int = 1000,
    evaluator_episodes: int = 1,
    evaluator_period_seconds: float | None = 10.0,
    checkpoint_period_seconds: float = 600.0,
    progress: bool = True,
    resume: bool = False,
    options: ProgramOptions | None = None,
    on_poll: Callable[[DistributedProgram], None] | None = None,
) -> DistributedResult:
    """Trains DMPO with `num_actors` acting nodes on Ray until a step limit (or Ctrl-C).

    Args:
      config: the agent's configuration (`samples_per_insert=None` ⇒ `MinSize` replay limiter).
      environment: a task name for `dmpo.envs.make`, or `factory(is_eval: bool) -> dm_env.Environment`
        (it may also take `seed=`; each node then gets its own seed).
      num_actors: acting nodes.
      run_dir: the run directory (config, logs, checkpoints); created if needed.
      seed: base seed; every node derives its own from it (a replaced actor gets a new one).
      max_actor_steps / max_learner_steps: stop conditions (at least one should be given).
      ray_address: join this cluster; None starts a private local cluster (localhost only) and stops
        it at the end. If Ray is already initialised in this process, that cluster is used.
      num_cpus: CPUs of the private local cluster (None: all).
      network_factory: `factory(env_spec) -> DMPONetworks` for every node (default: the config's).
      variable_update_period: actor steps between asynchronous fetches of the target policy.
      evaluator_episodes / evaluator_period_seconds: evaluation rounds (period None: no evaluator).
      checkpoint_period_seconds: learner checkpoint period (plus one at the end).
      progress: show the progress line on the driver.
      resume: continue the run in `run_dir` from its latest checkpoint.
      options: further layout settings; the keyword arguments above override its fields.
      on_poll: called with the program after every monitoring pass (tools and tests).

    Returns:
      A `DistributedResult`. Raises `NodeFailure` when the learner, replay or counter node dies (after
      stopping everything); re-raises KeyboardInterrupt after writing a final checkpoint.
    """
    options = dataclasses.replace(
        options or ProgramOptions(), num_actors=num_actors, max_actor_steps=max_actor_steps,
        max_learner_steps=max_learner_steps, variable_update_period=variable_update_period,
        evaluator_episodes=evaluator_episodes, evaluator_period_seconds=evaluator_period_seconds,
        checkpoint_period_seconds=checkpoint_period_seconds)
    program = DistributedProgram(config, environment, run_dir=run_dir, seed=seed, options=options,
                                 network_factory=network_factory, resume=resume)
    with ray_cluster(ray_address, num_cpus=num_cpus):
        return _drive(program, progress, on_poll)


def _drive(program: DistributedProgram, progress: bool,
           on_poll: Callable[[DistributedProgram], None] | None) -> DistributedResult:
    from dmpo.utils.progress import Progress

    status = "failed"
    try:
        program.start()
        with Progress(program.options.max_actor_steps, enabled=progress, description="distributed") as bar:
            shown = [0]
            while not program.poll():
                _show(program, bar, shown)
                if on_poll is not None:
                    on_poll(program)
                time.sleep(program.options.poll_seconds)
            _show(program, bar, shown)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        result = program.stop(status)
    return result


def _show(program: DistributedProgram, bar: Any, shown: list[int]) -> None:
    """Updates the progress line; `shown[0]` is how many evaluation episodes were shown already."""
    if not bar.active:
        return
    counts = program.counts
    latest = program.latest_evaluation()
    new_return = None
    if latest is not None and latest[0] > shown[0]:
        shown[0] = latest[0]
        new_return = latest[2]
    bar.update(env_steps=int(counts.get("actor_steps", 0)), episodes=int(counts.get("actor_episodes", 0)),
               learner_steps=int(counts.get("learner_steps", 0)), last_return=new_return)
