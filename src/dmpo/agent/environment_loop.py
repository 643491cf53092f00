"""The environment loop that acts and learns, in both modes, and the stand-alone policy evaluation.

`EnvironmentLoop` steps N ≥ 1 environments in lockstep for one agent (algorithm.md §3, §7.5); one
environment is the case N = 1, and both trainers run it (the single-process one and every acting
node of the distributed program). Per step: stack the N current observations →
`agent.select_actions` (one batched call) → step every environment → for each environment i in
order: `agent.observe(action_i, timestep_i, env=i)` and `agent.update()` (so a learning schedule that
counts environment steps sees each of them). Environments end their episodes independently: one that
reaches LAST logs its episode row (the keys of algorithm.md §7.5; with N > 1 also `env_index`),
calls `on_episode_end`, and is reset while the others go on. `steps` is counted on every step (N at
a time), so the count is always the environment steps taken; `episodes` at each episode end.

Stopping: `should_stop` and `request_stop` are looked at after the episode ends of a step (and
before the first step); `num_steps` and `num_episodes` end the run at the first episode end once
that many steps were taken or episodes ended. The environments that are in the middle of an episode
then drop it (`agent.drop_episode`): the transitions their adders already wrote stay in replay. With
one environment every stop falls on an episode end, so nothing is ever dropped.

`evaluate` runs a fixed policy for a number of episodes and summarises the returns; it can record
the first episodes to an MP4 or GIF file.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import dm_env
import numpy as np
import tree

from dmpo.agent.acting import stack_observations
from dmpo.envs.rendering import default_render
from dmpo.reporting.logging import Logger, make_logger
from dmpo.types import NestedArray
from dmpo.utils.counting import Counter

__all__ = ["Agent", "EnvironmentLoop", "evaluate"]


class Agent(Protocol):
    """What the loop drives (the `DMPO` agent, or a `dmpo.agent.acting.BatchedActor`): one batched
    policy call for all environments, and each environment's timesteps by its index."""

    def select_actions(self, observations: Any) -> np.ndarray: ...

    def observe_first(self, timestep: dm_env.TimeStep, env: int = 0) -> None: ...

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep, env: int = 0) -> None: ...

    def drop_episode(self, env: int) -> None: ...

    def update(self, wait: bool = False) -> None: ...


def _add_reward(total: Any, reward: Any) -> Any:
    """Running sum of (possibly nested) rewards, in float64."""
    if total is None:
        return tree.map_structure(lambda r: np.asarray(r, dtype=np.float64).copy(), reward)
    return tree.map_structure(lambda t, r: t + np.asarray(r, dtype=np.float64), total, reward)


def _plain_return(total: Any) -> Any:
    if total is None:
        return 0.0
    return tree.map_structure(lambda t: t.item() if t.ndim == 0 else t, total)


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")


class _Episode:
    """Running totals of one environment's current episode."""

    def __init__(self, reset_duration: float) -> None:
        self.start = time.perf_counter() - reset_duration
        self.reset_duration = reset_duration
        self.length = 0
        self.total_reward: Any = None


class EnvironmentLoop:
    """Steps `environments` in lockstep for `agent`, counting steps and episodes and logging one row
    per episode (module docstring).

    Args:
      environments: one dm_env environment, or a sequence of N ≥ 1 of one task.
      agent: see `Agent`.
      counter: where `episodes` and `steps` are counted (a fresh root counter by default).
      logger: receives each episode's row (default: terminal, at most once per second).
      label: logger label and, for the default logger, the line prefix.
      should_update: call `agent.update()` after every environment step.
      should_stop: polled before the first step and after each step's episode ends; True ends `run()`.
      on_episode_end: called with each episode's row after it is logged (evaluation, checkpoints, …).

    A row's `select_action_duration_sec` is the episode's share of the batched policy calls (1/N of
    each) and `env_step_duration_sec` its own environment's time.
    """

    def __init__(self, environments: dm_env.Environment | Sequence[dm_env.Environment], agent: Agent,
                 counter: Counter | None = None, logger: Logger | None = None, *,
                 label: str = "environment_loop", should_update: bool = True,
                 should_stop: Callable[[], bool] | None = None,
                 on_episode_end: Callable[[dict[str, Any]], None] | None = None) -> None:
        environments = list(environments) if isinstance(environments, Sequence) else [environments]
        if not environments:
            raise ValueError("EnvironmentLoop needs at least one environment")
        self._environments = environments
        self._agent = agent
        self._counter = counter if counter is not None else Counter()
        self._logger = logger if logger is not None else make_logger(label, None)
        self._should_update = should_update
        self._should_stop = should_stop
        self._on_episode_end = on_episode_end
        self._stop_event = threading.Event()
        self._episodes = 0  # ended in the current run()
        self.select_seconds = 0.0
        """Time spent in the batched policy calls so far (benchmarks read it)."""
        self.step_seconds = 0.0
        """Time spent in `environment.step` so far, all environments together."""

    def request_stop(self) -> None:
        """Asks `run()` to return at the next episode end (safe to call from another thread)."""
        self._stop_event.set()

    def _reset(self, index: int) -> tuple[dm_env.TimeStep, _Episode]:
        t0 = time.perf_counter()
        timestep = self._environments[index].reset()
        episode = _Episode(time.perf_counter() - t0)
        self._agent.observe_first(timestep, env=index)
        return timestep, episode

    def run(self, *, num_steps: int | None = None, num_episodes: int | None = None) -> int:
        """Runs until a stop (module docstring): at the first episode end once `num_steps` steps were
        taken or `num_episodes` episodes ended (give at most one), or once a stop is requested; with
        neither, until stopped. Returns the environment steps taken, all environments together."""
        if num_episodes is not None and num_steps is not None:
            raise ValueError("give at most one of num_episodes and num_steps, got both "
                             f"({num_episodes}, {num_steps})")
        _check_count("num_episodes", num_episodes)
        _check_count("num_steps", num_steps)
        n = len(self._environments)
        steps = self._episodes = 0
        if self._done(steps, num_steps, num_episodes):
            return steps
        started = [self._reset(i) for i in range(n)]
        timesteps = [timestep for timestep, _ in started]
        episodes = [episode for _, episode in started]
        select_share = np.zeros(n)
        step_time = np.zeros(n)
        while True:
            t0 = time.perf_counter()
            actions = self._agent.select_actions(stack_observations([ts.observation for ts in timesteps]))
            select = time.perf_counter() - t0
            self.select_seconds += select
            select_share += select / n
            for i, environment in enumerate(self._environments):
                t1 = time.perf_counter()
                timesteps[i] = environment.step(actions[i])
                elapsed = time.perf_counter() - t1
                step_time[i] += elapsed
                self.step_seconds += elapsed
            ended = []
            for i in range(n):
                self._agent.observe(actions[i], timesteps[i], env=i)
                if self._should_update:
                    self._agent.update()
                episodes[i].length += 1
                episodes[i].total_reward = _add_reward(episodes[i].total_reward, timesteps[i].reward)
                if timesteps[i].last():
                    ended.append(i)
            steps += n
            self._counter.increment(steps=n)
            for i in ended:
                self._finish(i, episodes[i], select_share[i], step_time[i])
                select_share[i] = step_time[i] = 0.0
            if ended and self._done(steps, num_steps, num_episodes):
                break
            for i in ended:
                timesteps[i], episodes[i] = self._reset(i)
        for i in range(n):
            if not timesteps[i].last():
                self._agent.drop_episode(i)
        return steps

    def _finish(self, index: int, episode: _Episode, select_duration: float, step_duration: float) -> None:
        self._episodes += 1
        counts = self._counter.increment(episodes=1)
        duration = time.perf_counter() - episode.start
        row: dict[str, Any] = {
            "episode_length": episode.length,
            "episode_return": _plain_return(episode.total_reward),
            "steps_per_second": episode.length / duration if duration > 0 else float("nan"),
            "env_reset_duration_sec": episode.reset_duration,
            "select_action_duration_sec": select_duration,
            "env_step_duration_sec": step_duration,
            "episode_duration": duration,
        }
        if len(self._environments) > 1:
            row["env_index"] = index
        row.update(counts)
        self._logger.write(row)
        if self._on_episode_end is not None:
            self._on_episode_end(row)

    def _done(self, steps: int, num_steps: int | None, num_episodes: int | None) -> bool:
        if num_steps is not None and steps >= num_steps:
            return True
        if num_episodes is not None and self._episodes >= num_episodes:
            return True
        if self._stop_event.is_set():
            return True
        return self._should_stop is not None and bool(self._should_stop())


# ------------------------------------------------------------------------------------------- evaluation


class _VideoWriter:
    """Streams frames to a temporary file next to `path` and moves it into place on success."""

    def __init__(self, path: Path, fps: float) -> None:
        self._path = path
        self._tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
        self._fps = fps
        self._writer: Any = None
        self._shape: tuple[int, ...] | None = None
        self.frames = 0

    def append(self, frame: Any) -> None:
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
            raise ValueError(f"render_fn must return uint8 frames of shape [H, W, 3], got {frame.dtype} "
                             f"{frame.shape}")
        if self._writer is None:
            import imageio.v2 as imageio

            from dmpo.utils.quiet import no_ffmpeg_fork_handlers

            no_ffmpeg_fork_handlers()  # else JAX warns of an os.fork() when ffmpeg starts

            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._shape = frame.shape
            if self._path.suffix.lower() == ".gif":
                self._writer = imageio.get_writer(self._tmp, duration=1000.0 / self._fps, loop=0)
            else:
                self._writer = imageio.get_writer(self._tmp, fps=self._fps, codec="libx264",
                                                  pixelformat="yuv420p", macro_block_size=1)
        elif frame.shape != self._shape:
            raise ValueError(f"video frames must all have shape {self._shape}, got {frame.shape}")
        self._writer.append_data(frame)
        self.frames += 1

    def finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
            os.replace(self._tmp, self._path)

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: S110 - ffmpeg may be gone already (Ctrl-C); the file is dropped anyway
                pass
            finally:
                self._tmp.unlink(missing_ok=True)


def _check_evaluate_args(environment: Any, num_episodes: int, seed: int | None,
                         video_path: Path | None, video_episodes: int, fps: float) -> None:
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"num_episodes must be a positive integer, got {num_episodes!r}")
    if seed is not None and not callable(getattr(environment, "seed", None)):
        raise TypeError(f"evaluate(seed={seed}) needs an environment with a seed(int) method; "
                        f"{type(environment).__name__} has none (seed it when it is built instead)")
    if video_path is not None:
        if video_path.suffix.lower() not in (".mp4", ".gif"):
            raise ValueError(f"video_path must end in .mp4 or .gif, got {str(video_path)!r}")
        if isinstance(video_episodes, bool) or not isinstance(video_episodes, int) or video_episodes < 1:
            raise ValueError(f"video_episodes must be a positive integer, got {video_episodes!r}")
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps!r}")


def evaluate(
    environment: dm_env.Environment,
    policy_fn: Callable[[NestedArray], Any],
    num_episodes: int,
    *,
    seed: int | None = None,
    video_path: str | os.PathLike[str] | None = None,
    render_fn: Callable[[Any], np.ndarray] | None = None,
    video_episodes: int = 1,
    fps: float = 30.0,
) -> dict[str, Any]:
    """Runs `policy_fn(observation) -> action` for `num_episodes` episodes and summarises them.

    Returns `return_mean/std/min/max` (population std over episodes of undiscounted scalar returns),
    `length_mean`, and the per-episode `episode_returns` and `episode_lengths`. `seed` is passed to
    `environment.seed()` first. With `video_path` (.mp4 or .gif) the first `video_episodes` episodes are
    recorded, one frame after reset and one after every step, with `render_fn(environment)`
    (default: `dmpo.envs.rendering.default_render`). The video file appears only once it is complete.
    """
    video = Path(video_path) if video_path is not None else None
    _check_evaluate_args(environment, num_episodes, seed, video, video_episodes, fps)
    if seed is not None:
        environment.seed(seed)  # type: ignore[attr-defined]
    render = render_fn or default_render
    writer = _VideoWriter(video, fps) if video is not None else None
    returns, lengths = [], []
    try:
        for episode in range(num_episodes):
            recording = writer is not None and episode < video_episodes
            timestep = environment.reset()
            if recording:
                writer.append(render(environment))
            total, length = 0.0, 0
            while not timestep.last():
                timestep = environment.step(policy_fn(timestep.observation))
                total += float(timestep.reward)
                length += 1
                if recording:
                    writer.append(render(environment))
            returns.append(total)
            lengths.append(length)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is not None:
        writer.finish()
    values = np.asarray(returns)
    return {
        "return_mean": float(values.mean()),
        "return_std": float(values.std()),
        "return_min": float(values.min()),
        "return_max": float(values.max()),
        "length_mean": float(np.mean(lengths)),
        "episode_returns": returns,
        "episode_lengths": lengths,
    }
