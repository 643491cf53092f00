"""A shipped policy acts like the trained one, in the task's own action space.

Closed loop: the ONNX export runs with onnxruntime in the task itself (no dmpo in between) for a few
episodes, and the actions the task receives and the returns must equal what `dmpo eval` sent the same
task on the same seeds. The expected side is recorded at the task (its `step`), never computed by
the code under test. Tasks: lopsided bounds `[-3, 1] x [-0.5, 2]`, gymnasium Pendulum-v1, and a
pixel task with action repeat 2 and a frame stack of 3.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium
import jax
import numpy as np
import pytest

import dmpo
from dmpo.cli.main import main
from lopsided_env import HIGH, LOW, LopsidedTask

onnxruntime = pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parents[1]
TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2", "--agent.batch-size", "16",
        "--agent.min-replay-size", "60", "--agent.max-replay-size", "2000", "--agent.samples-per-insert", "8"]


def train(run: Path, env: str, steps: int, *extra: str) -> Path:
    main(["train", "--env", env, "--steps", str(steps), "--eval-every", "0", "--run-dir", str(run),
          "--no-progress", *TINY, *extra])
    return run


def export_onnx(run: Path, output: Path) -> tuple[object, dict[str, str]]:
    main(["export", str(run), "--format", "onnx", "-o", str(output)])
    session = onnxruntime.InferenceSession(str(output))
    return session, session.get_modelmeta().custom_metadata_map


def act(session, observation: np.ndarray, dtype=np.float32) -> np.ndarray:
    (actions,) = session.run(["action"], {"observation": observation[None].astype(dtype)})
    return actions[0]


@contextlib.contextmanager
def recording_gym_task(task_class):
    """Records, per episode, the (action, reward) pairs every instance of `task_class` receives."""
    episodes: list[list[tuple[np.ndarray, float]]] = []
    original_reset, original_step = task_class.reset, task_class.step

    def reset(self, *args, **kwargs):
        episodes.append([])
        return original_reset(self, *args, **kwargs)

    def step(self, action):
        result = original_step(self, action)
        episodes[-1].append((np.array(action, dtype=np.float64, copy=True), float(result[1])))
        return result

    task_class.reset, task_class.step = reset, step
    try:
        yield episodes
    finally:
        task_class.reset, task_class.step = original_reset, original_step


def run_gym_onnx(session, make_task, seed: int, episodes: int, low, high) -> None:
    """The serving loop a user writes: the first reset seeded, the action clipped to the bounds."""
    task = make_task()
    for episode in range(episodes):
        observation, _ = task.reset(seed=seed if episode == 0 else None)
        done = False
        while not done:
            action = np.clip(act(session, observation), low, high)
            observation, _, terminated, truncated, _ = task.step(action)
            done = terminated or truncated


def assert_same_episodes(got, expected) -> None:
    assert len(got) == len(expected) and all(len(a) == len(b) for a, b in zip(got, expected, strict=True))
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.stack([a for a, _ in ours]), np.stack([a for a, _ in theirs]),
                                   rtol=1e-6, atol=1e-6)  # float32 precision of actions of size ~1
        np.testing.assert_allclose(sum(r for _, r in ours), sum(r for _, r in theirs), rtol=1e-5)


def test_lopsided_bounds_onnx_load_policy_and_stablehlo_match_dmpo_eval(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO / "tests")  # the entry point lopsided_env:make is found from here
    run = train(tmp_path / "run", "lopsided_env:make", 150)
    with recording_gym_task(LopsidedTask) as episodes:
        main(["eval", str(run), "--episodes", "2", "--seed", "7"])
    expected = list(episodes)
    assert [len(episode) for episode in expected] == [30, 30]
    sent = np.stack([a for episode in expected for a, _ in episode])
    assert np.all(sent >= LOW) and np.all(sent <= HIGH)
    # The map matters here: a policy that sent its canonical action (clipped to the bounds) instead
    # would send something else (the canonical action, from the affine map inverted by hand).
    canonical = (2.0 * sent - (LOW + HIGH)) / (HIGH - LOW)
    assert np.max(np.abs(np.clip(canonical, LOW, HIGH) - sent)) > 0.5

    session, meta = export_onnx(run, tmp_path / "policy.onnx")
    assert json.loads(meta["action_minimum"]) == LOW.tolist()
    assert json.loads(meta["action_maximum"]) == HIGH.tolist()
    assert (meta["action_repeat"], meta["frame_stack"]) == ("1", "1")
    with recording_gym_task(LopsidedTask) as episodes:
        run_gym_onnx(session, LopsidedTask, 7, 2, json.loads(meta["action_minimum"]),
                     json.loads(meta["action_maximum"]))
    assert_same_episodes(list(episodes), expected)

    # load_policy: every observation the task showed in one batch, in the task's own bounds.
    task = LopsidedTask()
    observations = []
    for episode in range(2):
        observation, _ = task.reset(seed=7 if episode == 0 else None)
        for action, _ in expected[episode]:
            observations.append(observation)
            observation, *_ = task.step(action)
    policy = dmpo.load_policy(run)
    np.testing.assert_array_equal(policy.action_minimum, LOW)
    np.testing.assert_allclose(policy(np.stack(observations)), sent, rtol=1e-6, atol=1e-6)
    actions, state = policy.predict(np.stack(observations))
    assert state is None
    np.testing.assert_allclose(actions, sent, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(policy(observations[0]), sent[0], rtol=1e-6, atol=1e-6)

    main(["export", str(run), "--format", "stablehlo", "-o", str(tmp_path / "policy.stablehlo")])
    exported = jax.export.deserialize(bytearray((tmp_path / "policy.stablehlo").read_bytes()))
    np.testing.assert_allclose(np.asarray(exported.call(np.stack(observations))), sent, rtol=1e-6, atol=1e-6)
    sidecar = json.loads((tmp_path / "policy.stablehlo.json").read_text())
    assert json.loads(sidecar["action_minimum"]) == LOW.tolist()


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("pendulum") / "run", "gym:Pendulum-v1", 200)


def test_pendulum_onnx_matches_dmpo_eval(pendulum_run, tmp_path, capsys):
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    with recording_gym_task(PendulumEnv) as episodes:
        main(["eval", str(pendulum_run), "--episodes", "2", "--seed", "3"])
    expected = list(episodes)
    assert [len(episode) for episode in expected] == [200, 200]
    session, meta = export_onnx(pendulum_run, tmp_path / "policy.onnx")
    assert (json.loads(meta["action_minimum"]), json.loads(meta["action_maximum"])) == ([-2.0], [2.0])
    with recording_gym_task(PendulumEnv) as episodes:
        run_gym_onnx(session, lambda: gymnasium.make("Pendulum-v1"), 3, 2, [-2.0], [2.0])
    assert_same_episodes(list(episodes), expected)


def docs_example() -> str:
    """The first python code block of docs/export.md's serving section, as a user would copy it."""
    page = (REPO / "docs" / "export.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    serving = [block for block in blocks if "onnxruntime.InferenceSession" in block]
    assert serving, "docs/export.md has no onnxruntime serving example"
    return serving[0]


def test_the_docs_serving_example_runs_as_written(pendulum_run, tmp_path, capsys):
    main(["export", str(pendulum_run), "--format", "onnx", "-o", str(tmp_path / "policy.onnx")])
    main(["eval", str(pendulum_run), "--episodes", "1", "--seed", "0"])
    reported = float(re.search(r"return (-?[\d.]+)", capsys.readouterr().out).group(1))
    script = tmp_path / "serve.py"
    script.write_text(docs_example(), encoding="utf-8")
    # Only onnxruntime, gymnasium and numpy: run where dmpo is not importable.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-I", str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = float(re.search(r"return (-?[\d.]+)", result.stdout).group(1))
    assert printed == pytest.approx(reported, abs=0.1)  # dmpo eval prints one decimal


def test_a_batch_of_a_thousand_observations_in_one_call(pendulum_run):
    policy = dmpo.load_policy(pendulum_run)
    observations = np.random.default_rng(0).uniform(-8.0, 8.0, (1000, 3)).astype(np.float32)
    actions = policy(observations)
    assert actions.shape == (1000, 1) and np.all(np.abs(actions) <= 2.0)
    for index in (0, 1, 500, 999):
        np.testing.assert_allclose(policy(observations[index]), actions[index], rtol=1e-6, atol=1e-6)
    assert np.std(actions) > 0  # not one constant action
    with pytest.raises(ValueError, match=r"observation: expected one observation of shape\(s\) \[\(3,\)\]"):
        policy(observations[:, :2])


@pytest.mark.skipif(sys.platform != "linux", reason="headless EGL rendering")
def test_pixel_task_with_action_repeat_onnx_matches_dmpo_eval(tmp_path):
    os.environ.setdefault("MUJOCO_GL", "egl")
    from dm_control.rl import control

    from dmpo.envs import control_suite
    from dmpo.envs.pixels import PixelObservationWrapper

    run = train(tmp_path / "run", "dmc:cartpole-swingup", 20, "--pixels", "--agent.min-replay-size", "1000")
    with recording_gym_task(control.Environment) as episodes:
        main(["eval", str(run), "--episodes", "1", "--seed", "5"])
    expected = [[(action, reward) for action, reward in episode] for episode in episodes]
    assert [len(episode) for episode in expected] == [1000]  # 500 agent steps, each repeated twice
    sent = np.stack([action for action, _ in expected[0]])
    assert np.ptp(sent) > 1e-3  # the policy answers what it sees: not one constant action

    session, meta = export_onnx(run, tmp_path / "policy.onnx")
    repeat, frames = int(meta["action_repeat"]), int(meta["frame_stack"])
    assert (repeat, frames) == (2, 3)
    low, high = json.loads(meta["action_minimum"]), json.loads(meta["action_maximum"])
    dtype = json.loads(meta["observation_input"])["dtype"]
    assert dtype == "uint8"
    with recording_gym_task(control.Environment) as episodes:
        task = control_suite.load("cartpole-swingup", 5)
        camera = PixelObservationWrapper(task, image_size=84)  # dmpo's renderer; the loop is the user's
        timestep = task.reset()
        stack = [camera.render()] * frames
        while not timestep.last():
            action = np.clip(act(session, np.concatenate(stack, axis=-1), dtype), low, high)
            for _ in range(repeat):
                timestep = task.step(action)
                if timestep.last():
                    break
            stack = [*stack[1:], camera.render()]
        camera.close()
    # dm_control's step returns a TimeStep: its reward is at index 1 as gymnasium's is.
    assert_same_episodes(list(episodes), expected)
