"""Videos of evaluation episodes: the camera they are filmed with, and where training writes them.

Cameras. `camera_render_fn(camera)` renders RGB frames (dm_control 240×320, gymnasium at its own
480×480) from a model camera given by name or index. By default it picks a camera that follows the
body where the task has one: a dm_control suite task's camera 0 (the suite's locomotion tasks define
it as a tracking camera, e.g. cheetah and walker `side`), and for a gymnasium MuJoCo task its model's
`track` camera (HalfCheetah, Hopper, Walker2d, Ant, ...), which gymnasium itself replaces by a free
camera that stays where the episode started. Tasks without either render with their own default view.

Training videos. With `TrainConfig.video_every = N` the first evaluation after every N environment
steps films one episode of the evaluation policy to `<run>/videos/step_<env steps, 12 digits>.mp4`
(`video_path`); single-process it is the first episode of that evaluation, distributed the evaluator
node films one extra episode after the round. The file appears once complete, so a tracker or a
callback may upload every `videos/step_*.mp4` it finds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dmpo.envs.rendering import default_render, wrapper_chain

__all__ = ["camera_render_fn", "check_can_film", "parse_camera", "rendering_factory", "video_path"]

_SIZE = {"height": 240, "width": 320}


def parse_camera(text: str | None) -> str | int | None:
    """`--camera` as typed: an index (`0`, `-1` for a free camera) or a camera name."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else text


def video_path(run_dir: str | os.PathLike[str], env_steps: int) -> Path:
    return Path(run_dir) / "videos" / f"step_{int(env_steps):012d}.mp4"


def rendering_factory(factory: Any) -> Any:
    """The environment factory to film with: a `TaskFactory` remade with `render=True` (gymnasium
    tasks only render when made so); any other factory as it is."""
    from dmpo.envs import TaskFactory

    if isinstance(factory, TaskFactory):
        return TaskFactory(factory.name, **{**factory.options, "render": True})
    return factory


def check_can_film(factory: Any, seed: int) -> None:
    """Renders one frame of the task now (EnvError if it cannot, e.g. pygame missing), so that
    `--video-every` fails before training rather than at the first video."""
    environment = rendering_factory(factory)(seed)
    try:
        environment.reset()
        camera_render_fn()(environment)
    finally:
        close = getattr(environment, "close", None)
        if close is not None:
            close()


def _camera_names(model: Any) -> list[str]:
    import mujoco

    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) or str(i) for i in range(model.ncam)]


def _camera_id(model: Any, camera: str | int, task: str) -> int:
    import mujoco

    from dmpo.envs import EnvError

    if isinstance(camera, str):
        index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    else:
        index = camera if -1 <= camera < model.ncam else -2
    if index < -1 or (isinstance(camera, str) and index == -1):
        raise EnvError(f"{task} has no camera {camera!r}; its cameras are {_camera_names(model)} "
                       "(by name or index; -1 is the free camera)")
    return int(index)


def _aim_gym_camera(gym_env: Any, camera: str | int | None) -> None:
    """Points gymnasium's MuJoCo renderer at `camera` (default: the model's `track` camera)."""
    import mujoco

    renderer = getattr(gym_env.unwrapped, "mujoco_renderer", None)
    if renderer is None:
        if camera is not None:
            from dmpo.envs import EnvError

            raise EnvError(f"{gym_env.spec.id if gym_env.spec else 'this task'} is not a MuJoCo task: "
                           "it has no cameras to choose from (drop --camera)")
        return
    model = gym_env.unwrapped.model
    if camera is None:
        track = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
        if track >= 0:
            renderer.camera_id = track
        return
    renderer.camera_id = _camera_id(model, camera, gym_env.spec.id if gym_env.spec else "this task")


def camera_render_fn(camera: str | int | None = None) -> Callable[[Any], np.ndarray]:
    """A `render_fn(environment) -> uint8 [H, W, 3]` for `evaluate` filming with `camera`."""
    aimed: set[int] = set()

    def render(environment: Any) -> np.ndarray:
        for layer in wrapper_chain(environment):
            physics = getattr(layer, "physics", None)
            if physics is not None:  # dm_control: the suite's camera 0 tracks in locomotion tasks
                chosen = 0 if camera is None else camera
                if id(layer) not in aimed:
                    _camera_id(physics.model.ptr, chosen, "this task")
                    aimed.add(id(layer))
                return physics.render(camera_id=chosen, **_SIZE)
            gym_env = getattr(layer, "_gym_env", None)
            if gym_env is not None:
                if id(layer) not in aimed:
                    _aim_gym_camera(gym_env, camera)
                    aimed.add(id(layer))
                return layer.render()
        return default_render(environment)

    return render
