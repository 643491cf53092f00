"""Cameras of videos: a tracking camera by default, a named or numbered one on request, clear errors;
the default render behind an environment's wrappers."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from dmpo.envs import EnvError, make
from dmpo.envs.rendering import default_render, wrapper_chain
from dmpo.lifecycle.videos import camera_render_fn, parse_camera, video_path


def test_parse_camera_and_video_names(tmp_path):
    assert parse_camera(None) is None
    assert (parse_camera("2"), parse_camera("-1"), parse_camera("side")) == (2, -1, "side")
    assert video_path(tmp_path, 40_000) == tmp_path / "videos" / "step_000000040000.mp4"


def test_gym_mujoco_video_follows_the_body_by_default():
    """gymnasium films HalfCheetah with a free camera that the cheetah runs out of; the model's
    `track` camera follows it."""
    env = make("gym:HalfCheetah-v5", seed=0, render=True)
    gym_env = env
    while not hasattr(gym_env, "_gym_env"):  # down the pipeline's wrappers to the gymnasium adapter
        gym_env = gym_env._environment
    gym_env = gym_env._gym_env
    render = camera_render_fn()
    env.reset()
    frame = render(env)
    renderer = gym_env.unwrapped.mujoco_renderer
    track = mujoco.mj_name2id(gym_env.unwrapped.model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
    assert track >= 0 and renderer.camera_id == track
    assert frame.shape == (480, 480, 3)  # gymnasium renders at its own default size
    # The `track` camera follows the body's centre of mass: moved 20 m forward, so is the camera.
    model, data = gym_env.unwrapped.model, gym_env.unwrapped.data
    before = data.cam_xpos[track].copy()
    data.qpos[0] += 20.0
    mujoco.mj_forward(model, data)
    np.testing.assert_allclose(data.cam_xpos[track] - before, [20.0, 0.0, 0.0], atol=0.5)
    assert render(env).std() > 0
    with pytest.raises(EnvError, match=r"has no camera 'nosuch'; its cameras are \['track'\]"):
        camera_render_fn("nosuch")(env)  # a new render_fn aims again
    env.close()


def test_dm_control_camera_by_name_or_index():
    env = make("dmc:cheetah-run", seed=0)
    env.reset()
    side = camera_render_fn("side")(env)
    np.testing.assert_array_equal(camera_render_fn()(env), side)  # camera 0 is the tracking `side`
    assert not np.array_equal(camera_render_fn("back")(env), side)
    with pytest.raises(EnvError, match="no camera 'top'"):
        camera_render_fn("top")(env)


def test_default_render_walks_wrappers_to_dm_control_physics():
    from dm_control import suite

    class Wrapper:
        def __init__(self, environment):
            self._environment = environment

    env = suite.load("cartpole", "balance", task_kwargs={"time_limit": 0.03, "random": 0})
    frame = default_render(Wrapper(env))
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 0
    with pytest.raises(TypeError, match="render_fn"):
        default_render(object())


def test_wrapper_chain_ends_at_a_layer_met_before_and_at_max_depth():
    class Layer:
        def __init__(self, inner=None):
            self.env = inner

    inner = Layer()
    outer = Layer(Layer(inner))
    assert wrapper_chain(outer) == [outer, outer.env, inner]
    inner.env = outer  # a cycle
    assert wrapper_chain(outer) == [outer, outer.env, inner]
    assert wrapper_chain(outer, max_depth=2) == [outer, outer.env]
