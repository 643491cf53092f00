"""The actor–environment loop (algorithm.md §3, §7.5) and a stand-alone policy evaluation with optional video.

`EnvironmentLoop` runs whole episodes: reset, then select action → step → observe → update until the
LAST timestep, and logs one row per episode with the keys of algorithm.md §7.5. `evaluate` runs a fixed
policy for a number of episodes and summarises the returns; it can record the first episodes to an
MP4 or GIF file.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import dm_env
import numpy as np
import tree

from dmpo.reporting.logging import Logger, make_logger
from dmpo.types import NestedArray
from dmpo.utils.counting import Counter

__all__ = ["Agent", "EnvironmentLoop", "Observer", "default_render", "evaluate"]


class Agent(Protocol):
    """What the loop drives (a `dmpo.agent.acting.Actor` or the `DMPO` agent): acts on observations, sees
    every timestep, refreshes its parameters."""

    def select_action(self, observation: NestedArray) -> np.ndarray: ...

    def observe_first(self, timestep: dm_env.TimeStep) -> None: ...

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None: ...

    def update(self, wait: bool = False) -> None: ...


class Observer(Protocol):
    """Computes extra per-episode metrics from the timesteps (added to the episode's log row)."""

    def observe_first(self, environment: dm_env.Environment, timestep: dm_env.TimeStep) -> None: ...

    def observe(self, environment: dm_env.Environment, timestep: dm_env.TimeStep,
                action: np.ndarray) -> None: ...

    def get_metrics(self) -> Mapping[str, Any]: ...


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


class EnvironmentLoop:
    """Runs an actor in an environment, counting steps/episodes and logging one row per episode.

    Args:
      environment: a dm_env environment.
      actor: see `Agent`.
      counter: where `episodes` and `steps` are counted (a fresh root counter by default).
      logger: receives each episode's row (default: terminal, at most once per second).
      label: logger label and, for the default logger, the line prefix.
      should_update: call `actor.update()` after every environment step.
      observers: extra per-episode metrics.
      should_stop: polled before each episode; True ends `run()`.
      on_episode_end: called with each episode's row after it is logged (evaluation, checkpoints, …).
    """

    def __init__(
        self,
        environment: dm_env.Environment,
        actor: Agent,
        counter: Counter | None = None,
        logger: Logger | None = None,
        *,
        label: str = "environment_loop",
        should_update: bool = True,
        observers: Sequence[Observer] = (),
        should_stop: Callable[[], bool] | None = None,
        on_episode_end: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._environment = environment
        self._actor = actor
        self._counter = counter if counter is not None else Counter()
        self._logger = logger if logger is not None else make_logger(label, None)
        self._should_update = should_update
        self._observers = tuple(observers)
        self._should_stop = should_stop
        self._on_episode_end = on_episode_end
        self._stop_event = threading.Event()

    def request_stop(self) -> None:
        """Asks `run()` to return after the current episode (safe to call from another thread)."""
        self._stop_event.set()

    def run_episode(self) -> dict[str, Any]:
        """Runs one episode and returns its row (algorithm.md §7.5 keys, counts, observer metrics)."""
        episode_start = time.perf_counter()
        timestep = self._environment.reset()
        reset_duration = time.perf_counter() - episode_start
        self._actor.observe_first(timestep)
        for observer in self._observers:
            observer.observe_first(self._environment, timestep)

        length, total_reward = 0, None
        select_duration = step_duration = 0.0
        while not timestep.last():
            t0 = time.perf_counter()
            action = self._actor.select_action(timestep.observation)
            t1 = time.perf_counter()
            timestep = self._environment.step(action)
            t2 = time.perf_counter()
            select_duration += t1 - t0
            step_duration += t2 - t1
            self._actor.observe(action, next_timestep=timestep)
            for observer in self._observers:
                observer.observe(self._environment, timestep, action)
            if self._should_update:
                self._actor.update()
            length += 1
            total_reward = _add_reward(total_reward, timestep.reward)

        counts = self._counter.increment(episodes=1, steps=length)
        duration = time.perf_counter() - episode_start
        result: dict[str, Any] = {
            "episode_length": length,
            "episode_return": _plain_return(total_reward),
            "steps_per_second": length / duration if duration > 0 else float("nan"),
            "env_reset_duration_sec": reset_duration,
            "select_action_duration_sec": select_duration,
            "env_step_duration_sec": step_duration,
            "episode_duration": duration,
        }
        result.update(counts)
        for observer in self._observers:
            result.update(observer.get_metrics())
        return result

    def run(self, num_episodes: int | None = None, num_steps: int | None = None) -> int:
        """Runs episodes until `num_episodes` episodes or at least `num_steps` steps (the last episode
        is always finished), or until a stop is requested; both None runs until stopped.

        Returns the number of environment steps taken.
        """
        if num_episodes is not None and num_steps is not None:
            raise ValueError("give at most one of num_episodes and num_steps, got both "
                             f"({num_episodes}, {num_steps})")
        _check_count("num_episodes", num_episodes)
        _check_count("num_steps", num_steps)
        episodes = steps = 0
        while not self._done(episodes, steps, num_episodes, num_steps):
            result = self.run_episode()
            episodes += 1
            steps += result["episode_length"]
            self._logger.write(result)
            if self._on_episode_end is not None:
                self._on_episode_end(result)
        return steps

    def _done(self, episodes: int, steps: int, num_episodes: int | None, num_steps: int | None) -> bool:
        if num_episodes is not None and episodes >= num_episodes:
            return True
        if num_steps is not None and steps >= num_steps:
            return True
        if self._stop_event.is_set():
            return True
        return self._should_stop is not None and bool(self._should_stop())


# ------------------------------------------------------------------------------------------- evaluation

_WRAPPED_ATTRIBUTES = ("_environment", "environment", "_env", "env")
_DEFAULT_RENDER = {"height": 240, "width": 320, "camera_id": 0}


def _wrapper_chain(environment: Any, max_depth: int = 32) -> list[Any]:
    chain, seen = [environment], {id(environment)}
    while len(chain) < max_depth:
        inner = next((getattr(chain[-1], a) for a in _WRAPPED_ATTRIBUTES
                      if getattr(chain[-1], a, None) is not None), None)
        if inner is None or id(inner) in seen:
            break
        chain.append(inner)
        seen.add(id(inner))
    return chain


def default_render(environment: Any) -> np.ndarray:
    """An RGB frame of `environment`: from the first layer of its wrapper chain that has a `render()`
    method, else from the first one exposing a MuJoCo `physics` (dm_control; camera 0, 240×320)."""
    for layer in _wrapper_chain(environment):
        render = getattr(layer, "render", None)
        if callable(render):
            return render()
        physics = getattr(layer, "physics", None)
        if physics is not None:
            return physics.render(**_DEFAULT_RENDER)
    raise TypeError(f"cannot render a {type(environment).__name__}: no layer of it has a render() method or "
                    "a physics attribute; pass render_fn")


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
    (default: `default_render`). The video file appears only once it is complete.
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
