"""Tests of pixel observations (headless EGL rendering; each context costs ~1 s on this CPU, so few)."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import subprocess  # noqa: E402
import sys  # noqa: E402

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from dm_env import specs  # noqa: E402

from dmpo.envs import (  # noqa: E402
    EnvError,
    control_suite,  # noqa: E402
    make,
)
from dmpo.envs.pixels import PixelObservationWrapper  # noqa: E402

SIZE = 32  # smaller than 84 to keep the tests quick; the code path is the same


def _frames(observation: np.ndarray, channels: int = 3) -> list[np.ndarray]:
    return [observation[..., i:i + channels] for i in range(0, observation.shape[-1], channels)]


def test_pixel_observation_spec_reset_fill_and_one_frame_shift_per_step():
    env = make("dmc:cartpole-swingup", pixels=True, seed=0, action_repeat=1, image_size=SIZE, frame_stack=3)
    assert env.observation_spec() == specs.Array((SIZE, SIZE, 9), np.uint8, name="pixels")
    assert env.action_spec().dtype == np.float32 and env.action_spec().shape == (1,)
    first = env.reset().observation
    env.observation_spec().validate(first)
    f0 = _frames(first)
    assert np.array_equal(f0[0], f0[1]) and np.array_equal(f0[1], f0[2])  # reset fills the stack
    assert f0[0].std() > 0  # a real picture, not a blank buffer
    observations = [first]
    for _ in range(3):
        observations.append(env.step(np.ones(1, np.float32)).observation)
    for before, after in zip(observations, observations[1:], strict=False):
        assert np.array_equal(after[..., :6], before[..., 3:])  # oldest dropped, newest appended
    assert not np.array_equal(_frames(observations[3])[1], _frames(observations[3])[2])  # the cart moved
    assert observations[1] is not observations[2] and np.array_equal(_frames(observations[1])[0], f0[0])


def test_pixels_default_to_action_repeat_two_and_render_once_per_agent_step():
    env = make("dmc:cartpole-swingup", pixels=True, seed=0, image_size=SIZE)
    assert env.observation_spec().shape == (SIZE, SIZE, 9)
    control_timestep = env.control_timestep()
    env.reset()
    o1 = env.step(np.ones(1, np.float32)).observation
    assert env.physics.data.time == pytest.approx(2 * control_timestep)  # two control steps per step
    o2 = env.step(np.ones(1, np.float32)).observation
    # Rendering happens after the repeat (a deliberate deviation, see dmpo.envs.registry): each agent
    # step pushes exactly one new frame, so consecutive observations share two of three frames.
    assert np.array_equal(o2[..., :6], o1[..., 3:])
    assert np.array_equal(o2[..., 6:], env.render())  # the newest frame shows the current state


def test_fast_render_settings_are_applied_and_the_reused_camera_tracks_the_state():
    fast = PixelObservationWrapper(control_suite.load("cartpole-swingup", 0), image_size=SIZE)
    fast.reset()
    vis = fast.physics.model.vis
    assert (vis.global_.offwidth, vis.global_.offheight, vis.quality.offsamples) == (SIZE, SIZE, 0)
    scene_flags = fast.camera.scene.flags
    for flag in ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX"):
        assert scene_flags[getattr(mujoco.mjtRndFlag, flag)] == 0
    off = {"shadow": False, "reflection": False, "skybox": False}
    for _ in range(5):
        frame = fast.step(np.ones(1)).observation
        # dm_control's own per-call render with the same flags sees exactly the same picture.
        reference = fast.physics.render(SIZE, SIZE, camera_id=0, render_flag_overrides=dict(off))
        assert np.array_equal(frame, reference)
    assert not np.array_equal(frame, fast.reset().observation)  # frames follow the state

    default = PixelObservationWrapper(control_suite.load("cartpole-swingup", 0), image_size=SIZE, fast=False)
    frame_default = default.reset().observation
    assert default.physics.model.vis.quality.offsamples > 0  # untouched dm_control defaults
    assert frame_default.shape == (SIZE, SIZE, 3) and frame_default.dtype == np.uint8
    assert frame_default[0].max() > 0 and fast.render()[0].max() == 0  # top row: skybox vs black
    fast.close()
    default.close()


def test_bad_pixel_arguments():
    with pytest.raises(EnvError, match="camera_id"):
        make("dmc:cartpole-swingup", pixels=True, camera_id=99, image_size=SIZE)
    with pytest.raises(EnvError, match="frame_stack"):
        make("dmc:cartpole-swingup", pixels=True, frame_stack=0, image_size=SIZE)
    with pytest.raises(EnvError, match="image_size"):
        make("dmc:cartpole-swingup", pixels=True, image_size=0)
    with pytest.raises(EnvError, match="camera_id"):
        make("dmc:cartpole-swingup", pixels=True, camera_id=-2)


def test_dm_control_imported_without_a_headless_backend_gives_a_clear_error():
    script = (
        "from dm_control import suite\n"  # picks GLFW: MUJOCO_GL unset and no display
        "from dmpo.envs import EnvError, make\n"
        "try:\n"
        "    make('dmc:cartpole-swingup', pixels=True, image_size=16)\n"
        "except EnvError as error:\n"
        "    print('EnvError:', error)\n"
    )
    environ = {key: value for key, value in os.environ.items()
               if key not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY", "PYOPENGL_PLATFORM")}
    result = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True,
                            timeout=120)
    assert "EnvError:" in result.stdout, result.stderr
    assert "MUJOCO_GL=egl" in result.stdout and "'glfw'" in result.stdout


def test_the_render_settings_a_runtime_needs_are_recorded_in_the_snapshot_and_the_export(tmp_path):
    """What the pixel wrapper really does (read off the physics model and the camera's scene), the
    size, camera, frame stack and action repeat asked for: the same in the task record of the
    environment, of a snapshot written from it, and in the export metadata."""
    import json

    import jax

    import dmpo
    from dmpo.agent.networks import PolicyParams, init_params, make_networks, pixel_network_config
    from dmpo.agent.policies.export import metadata
    from dmpo.agent.policies.snapshot import save_policy
    from dmpo.envs import make_environment_spec
    from dmpo.envs.interface import task_interface

    env = make("dmc:cartpole-swingup", pixels=True, seed=0, image_size=SIZE, camera_id=1, frame_stack=2,
               action_repeat=3)
    observation = env.reset().observation
    recorded = task_interface(env).render
    wrapper = env
    while not isinstance(wrapper, PixelObservationWrapper):
        wrapper = wrapper.environment
    vis = wrapper.physics.model.vis
    assert recorded["offscreen_size"] == [vis.global_.offwidth, vis.global_.offheight] == [SIZE, SIZE]
    assert recorded["offscreen_samples"] == vis.quality.offsamples == 0
    flags = wrapper.camera.scene.flags  # against a scene as MuJoCo makes it: which flags were turned off
    default = mujoco.MjvScene(wrapper.physics.model.ptr, maxgeom=10).flags
    off = sorted(name for name, flag in mujoco.mjtRndFlag.__members__.items()
                 if int(flag) < len(flags) and default[int(flag)] and not flags[int(flag)])
    assert sorted(recorded["disabled_scene_flags"]) == off
    assert off == ["mjRND_REFLECTION", "mjRND_SHADOW", "mjRND_SKYBOX"]
    assert recorded["camera_id"] == wrapper.camera._render_camera.fixedcamid == 1
    assert recorded["image_size"] == observation.shape[0] == observation.shape[1] == SIZE
    assert recorded["frame_stack"] == observation.shape[2] // 3 == 2
    assert recorded["action_repeat"] == 3 and "once per agent step" in recorded["when"]

    config = pixel_network_config("impala", policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5)
    spec = make_environment_spec(env)
    params = init_params(make_networks(spec, config), spec, jax.random.PRNGKey(0))
    snapshot = save_policy(tmp_path / "policy.msgpack", spec, config,
                           PolicyParams(params.observation, params.policy),
                           {"env": "dmc:cartpole-swingup", "pixels": True})
    policy = dmpo.load_policy(snapshot)
    assert policy.task.render == recorded
    assert json.loads(metadata(policy)["render"]) == recorded
    env.close()
