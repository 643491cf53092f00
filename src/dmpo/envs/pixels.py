"""Pixel observations for dm_control tasks: camera render + frame stacking (algorithm.md §0, §4.3/§4.4).

`make(..., pixels=True)` replaces the state observation by a `uint8 [S, S, 3·F]` image: an S×S RGB
render of camera `camera_id` (default 0, S = 84), and the last F frames concatenated along the channel
axis, **oldest first** (after a reset the first frame fills all F slots). The pixel wrapper and the
frame stack sit outside the action repeat (`dmpo.envs.registry.make`: canonical actions → action
repeat → render → frame stack), so a frame is rendered once per agent step, after its action-repeat
task steps (and once at a reset): with action repeat 2 and F = 3 one observation holds the frames of
the last three agent steps, and each agent step shifts the stack by one frame.

What a runtime outside dmpo must reproduce to feed an exported pixel policy (the render settings
below, the image size, the camera, the frame stack and the action repeat) is recorded with the
policy: `PixelObservationWrapper.render_settings`, read by `dmpo.envs.interface.task_interface` into
the snapshot's task record and the export metadata (`render`).

Headless rendering: dm_control picks its OpenGL backend once, when `dm_control` (precisely
`dm_control._render`) is first imported, from the `MUJOCO_GL` environment variable. Importing plain
`mujoco`, or making a gymnasium MuJoCo env, before that does not matter (both checked).
`prepare_headless_rendering` does `os.environ.setdefault("MUJOCO_GL", "egl")`, and `make` calls it
before it loads a pixel task; it only has an effect if dm_control has not been imported yet. If
dm_control was imported earlier without `MUJOCO_GL` (e.g. by a state task made first in the same
process) it picked GLFW, which fails without a display: `PixelObservationWrapper` then raises an
`EnvError` that says to set `MUJOCO_GL=egl` in the environment before anything imports dm_control.
EGL works here with no extra package (software llvmpipe). State tasks leave `MUJOCO_GL` alone.

Fast render settings (`fast=True`, used by `make`). dm_control's defaults render into a 640×480
multisampled framebuffer with a 2048² shadow map, reflections and a skybox. We set, before the
rendering context is created:

* `model.vis.global_.offwidth = offheight = S` (offscreen buffer the size of the image),
* `model.vis.quality.offsamples = 0` (no multisample anti-aliasing),

and on the camera's scene turn off `mjtRndFlag.mjRND_SHADOW`, `mjRND_REFLECTION` and
`mjRND_SKYBOX` (the background becomes black; bodies and floor are drawn as before, minus shadows
and reflections). One `dm_control.mujoco.Camera` is built once and reused for every frame, instead
of `physics.render`'s new camera and scene per call. On this project's 2-core CPU (quiet), the
84×84 render call alone took ≈ 1.1–1.8 ms per frame against ≈ 28–31 ms with the defaults
(cartpole, walker, cheetah); benchmarks/pixels_env.py measures whole environment steps. The
images therefore differ from Acme's; `fast=False` renders exactly as dm_control's default
`physics.render(S, S, camera_id=...)` does.
"""

from __future__ import annotations

import os
import sys

import dm_env
import mujoco
import numpy as np
from dm_env import specs

from dmpo.envs.errors import EnvError, check_positive_int
from dmpo.envs.wrappers import EnvironmentWrapper

_DISABLED_SCENE_FLAGS = (
    mujoco.mjtRndFlag.mjRND_SHADOW,
    mujoco.mjtRndFlag.mjRND_REFLECTION,
    mujoco.mjtRndFlag.mjRND_SKYBOX,
)


def prepare_headless_rendering() -> None:
    """Defaults `MUJOCO_GL` to `egl`; only effective before dm_control is first imported."""
    os.environ.setdefault("MUJOCO_GL", "egl")


def _render_backend() -> str | None:
    from dm_control import _render  # holds the backend dm_control fixed at its first import

    return _render.BACKEND


def _backend_hint(backend: str | None) -> str:
    return (
        f"dm_control's OpenGL backend is {backend!r} (MUJOCO_GL is now {os.environ.get('MUJOCO_GL')!r}). "
        "For headless rendering set MUJOCO_GL=egl in the environment before anything imports dm_control "
        "(dmpo.envs.make sets it itself, but only has an effect if dm_control was not imported yet)."
    )


def _check_render_backend() -> None:
    """Fails early (before dm_control's own, obscure errors) when no usable backend was chosen."""
    backend = _render_backend()
    headless_linux = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if backend is None or (backend == "glfw" and headless_linux):
        raise EnvError("cannot render pixel observations without a display. " + _backend_hint(backend))


class PixelObservationWrapper(EnvironmentWrapper):
    """Replaces the observation of a dm_control environment by a `uint8 [S, S, 3]` camera image.

    Args:
      environment: a freshly loaded dm_control environment (it must expose `.physics`; the fast
        settings only apply if nothing rendered with it before).
      image_size: S, the image height and width.
      camera_id: the model camera (0 = first fixed camera; -1 = free camera).
      fast: apply the fast render settings of the module docstring; False renders with
        dm_control's defaults (for comparison).
    """

    def __init__(self, environment: dm_env.Environment, image_size: int = 84, camera_id: int = 0,
                 fast: bool = True):
        super().__init__(environment)
        self._size = check_positive_int(image_size, "image_size")
        physics = environment.physics
        if isinstance(camera_id, bool) or not isinstance(camera_id, (int, np.integer)) or not (
            -1 <= camera_id < physics.model.ncam
        ):
            raise EnvError(f"camera_id must be an integer in [-1, {physics.model.ncam - 1}] for this "
                           f"model, got {camera_id!r}")
        self._camera_id = int(camera_id)
        self._fast = fast
        if fast:
            physics.model.vis.global_.offwidth = self._size
            physics.model.vis.global_.offheight = self._size
            physics.model.vis.quality.offsamples = 0
        _check_render_backend()
        try:
            physics.contexts  # noqa: B018 (creates the OpenGL context now, so failures surface in make)
        except Exception as error:  # backends fail in many ways (ImportError, AttributeError, GLError)
            raise EnvError(f"cannot create an OpenGL context for pixel observations: {error!r}. "
                           + _backend_hint(_render_backend())) from error
        self._camera = None
        self._camera_data = None
        self._spec = specs.Array((self._size, self._size, 3), np.uint8, name="pixels")

    @property
    def render_settings(self) -> dict:
        """How this wrapper renders, as a runtime must reproduce it (JSON-ready)."""
        if not self._fast:
            return {"renderer": "dm_control physics.render (its defaults)", "image_size": self._size,
                    "camera_id": self._camera_id}
        return {"renderer": "dm_control.mujoco.Camera", "image_size": self._size,
                "camera_id": self._camera_id, "offscreen_size": [self._size, self._size],
                "offscreen_samples": 0,
                "disabled_scene_flags": [flag.name for flag in _DISABLED_SCENE_FLAGS]}

    @property
    def camera(self):
        """The reused `dm_control.mujoco.Camera` of the fast path (built on first use); None if not fast."""
        if not self._fast:
            return None
        from dm_control.mujoco import Camera

        physics = self._environment.physics
        if self._camera is None or self._camera_data is not physics.data:  # rebuilt if physics reloads
            if self._camera is not None:
                self._camera.scene.free()
            self._camera = Camera(physics, self._size, self._size, self._camera_id)
            for flag in _DISABLED_SCENE_FLAGS:
                self._camera.scene.flags[flag] = 0
            self._camera_data = physics.data
        return self._camera

    def render(self) -> np.ndarray:
        """The current camera image, a fresh `uint8 [S, S, 3]` array."""
        if self._fast:
            return np.array(self.camera.render(), copy=True)
        return self._environment.physics.render(self._size, self._size, camera_id=self._camera_id)

    def observation_spec(self) -> specs.Array:
        return self._spec

    def reset(self) -> dm_env.TimeStep:
        return self._environment.reset()._replace(observation=self.render())

    def step(self, action) -> dm_env.TimeStep:
        return self._environment.step(action)._replace(observation=self.render())

    def close(self) -> None:
        if self._camera is not None:
            self._camera.scene.free()
            self._camera = None
        super().close()


class FrameStackWrapper(EnvironmentWrapper):
    """Stacks the last `num_frames` `[H, W, C]` observations into `[H, W, C·num_frames]`, oldest first.

    At FIRST the frame fills every slot; afterwards each inner step drops the oldest frame.
    """

    def __init__(self, environment: dm_env.Environment, num_frames: int):
        super().__init__(environment)
        self._num_frames = check_positive_int(num_frames, "frame_stack")
        inner = environment.observation_spec()
        if not isinstance(inner, specs.Array) or len(inner.shape) != 3:
            raise EnvError(f"frame stacking needs an [H, W, C] array observation spec, got {inner!r}")
        height, width, channels = inner.shape
        self._spec = specs.Array((height, width, channels * self._num_frames), inner.dtype, name=inner.name)
        self._stack: np.ndarray | None = None

    @property
    def num_frames(self) -> int:
        """Frames stacked into each observation."""
        return self._num_frames

    def observation_spec(self) -> specs.Array:
        return self._spec

    def _push(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        frame = np.asarray(timestep.observation)
        if timestep.first() or self._stack is None:
            self._stack = np.concatenate([frame] * self._num_frames, axis=-1)
        else:
            self._stack = np.concatenate([self._stack[..., frame.shape[-1]:], frame], axis=-1)
        return timestep._replace(observation=self._stack)

    def reset(self) -> dm_env.TimeStep:
        return self._push(self._environment.reset())

    def step(self, action) -> dm_env.TimeStep:
        return self._push(self._environment.step(action))
