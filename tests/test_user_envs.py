"""A user's own environment by entry point, what DMPO cannot learn said at once, the 'auto'
critic support and the edge-mass metric. The environments live in tests/envs_for_tests.py."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dmpo.agent.learning.critic_support import resolve_support
from dmpo.agent.learning.support_monitor import ROWS, THRESHOLD, SupportMonitor
from dmpo.agent.losses import support_edge_mass
from dmpo.cli.main import main
from dmpo.config import ConfigError, DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig
from dmpo.envs import EnvError, TaskFactory, make
from dmpo.envs.entry_points import load_callable
from dmpo.envs.registry import PipelineFactory
from dmpo.lifecycle.task_setup import prepare_task
from images import assert_curves_drawn

REPO = Path(__file__).resolve().parents[1]
ENVS = "tests.envs_for_tests"
POINT_MASS = f"{ENVS}:make_point_mass"
TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2", "--agent.batch-size", "16",
        "--agent.min-replay-size", "60", "--agent.max-replay-size", "2000",
        "--agent.samples-per-insert", "16", "--eval-episodes", "1", "--no-progress"]


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # entry points are imported from the working directory, as `python -m` does


def cli(argv, capsys):
    """`dmpo ARGV` in this process: (exit code, stdout + stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def tiny_config(env: str, **networks) -> TrainConfig:
    agent = DMPOConfig(batch_size=16, min_replay_size=60, max_replay_size=2000, samples_per_insert=16.0,
                       learner=LearnerConfig(num_samples=2),
                       networks=NetworkConfig(policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5,
                                              **networks))
    return TrainConfig(env=env, steps=100, eval_every=0, agent=agent)


# -- what DMPO cannot learn ------------------------------------------------------------------------

@pytest.mark.parametrize("factory, expected", [
    ("make_discrete", "discrete action space Discrete(3)"),
    ("make_multi_discrete", "discrete action space MultiDiscrete"),
    ("make_unbounded", "finite bounds"),
    ("make_text_observations", "unsupported observation space Text"),
    ("make_graph_observations", "unsupported observation space Graph"),
    ("make_sequence_observations", "unsupported observation space Sequence"),
    ("make_not_an_env", "returned a str; it must return a gymnasium.Env or a dm_env.Environment"),
])
def test_unusable_spaces_are_one_line_errors_naming_them(factory, expected):
    with pytest.raises(EnvError) as error:
        make(f"{ENVS}:{factory}", seed=0)
    message = str(error.value)
    assert expected in message and message.startswith(f"{ENVS}:{factory}") and "\n" not in message


def test_nan_reward_and_wrong_shape_name_the_step():
    for factory, expected in (("make_nan_reward", "episode 1, step 3: the reward is not finite"),
                              ("make_wrong_shape", "episode 1, step 1: observation has shape (3,), "
                                                   "its spec says (2,)")):
        environment = make(f"{ENVS}:{factory}", seed=0)
        environment.reset()
        with pytest.raises(EnvError, match=expected.replace("(", r"\(").replace(")", r"\)")):
            for _ in range(5):
                environment.step(np.zeros(2, np.float32))


def test_image_observations_need_a_pixel_torso():
    config = tiny_config(f"{ENVS}:make_image_observations")
    with pytest.raises(EnvError, match="observation-network impala"):
        prepare_task(config)
    pixel = dataclasses.replace(config, agent=dataclasses.replace(
        config.agent, networks=dataclasses.replace(config.agent.networks, observation_network="drq")))
    assert prepare_task(pixel)[0].env == config.env


def test_gym_id_with_a_missing_dependency_is_one_line():
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401
        pytest.skip("Box2D is installed here")
    except ImportError:
        pass
    with pytest.raises(EnvError) as error:
        make("gym:CarRacing-v3")
    assert "optional dependency" in str(error.value) and "\n" not in str(error.value)


def test_check_env_prints_specs_and_errors(capsys):
    code, output = cli(["check-env", POINT_MASS, "--steps", "30"], capsys)
    assert code == 0, output
    assert "DMPO can learn it" in output and "float32 [2] in [-1.0, 1.0]" in output  # canonical actions
    assert "30 random steps: 1 episode(s) ended" in output  # 20-step episodes
    code, output = cli(["check-env", f"{ENVS}:make_discrete"], capsys)
    assert code == 2 and "discrete action space" in output


# -- entry points ----------------------------------------------------------------------------------

def test_gym_module_id_form_imports_the_module_that_registers_it():
    environment = make(f"gym:{ENVS}:PointMassTest-v0", seed=3)
    reference = make(POINT_MASS, seed=3)
    np.testing.assert_array_equal(environment.reset().observation, reference.reset().observation)
    assert environment.step(np.ones(2, np.float32)).reward == reference.step(np.ones(2, np.float32)).reward


def test_python_callables_go_through_the_pipeline_and_are_recorded():
    make_point_mass = load_callable(POINT_MASS)
    config, factory = prepare_task(tiny_config("dmc:cartpole-swingup", vmin=-30.0, vmax=5.0), make_point_mass)
    assert config.env == POINT_MASS  # importable by that name: resumable from the CLI
    environment = factory(0)
    assert environment.action_spec().minimum == -1.0 and environment.action_spec().dtype == np.float32
    # A canonical action of 1 is the Box's upper bound 2: the point moves 0.2 per step.
    first = environment.reset().observation
    np.testing.assert_allclose(environment.step(np.ones(2, np.float32)).observation, first + 0.2, rtol=1e-5)
    config, factory = prepare_task(tiny_config("dmc:cartpole-swingup", vmin=-30.0, vmax=5.0),
                                   lambda seed: make_point_mass(seed))
    assert config.env.startswith("python:") and config.env.endswith("<lambda>")
    with pytest.raises(EnvError, match="Python only"):
        make(config.env)


def test_a_factory_ray_cannot_pickle_is_refused_before_ray_starts():
    make_point_mass = load_callable(POINT_MASS)

    class HoldsALock:
        def __init__(self):
            self.lock = threading.Lock()

        def __call__(self, seed):
            with self.lock:
                return make_point_mass(seed)

    with pytest.raises(ConfigError, match="cannot be pickled for the Ray nodes"):
        prepare_task(tiny_config("dmc:cartpole-swingup", vmin=-30.0, vmax=5.0), HoldsALock(),
                     distributed=True)


def read_column(run: Path, log: str, column: str) -> list[float]:
    with open(run / "logs" / log / "logs.csv") as f:
        return [float(row[column]) for row in csv.DictReader(f)]


def test_entry_point_trains_evaluates_plots_and_resumes_exactly_from_the_cli(tmp_path, capsys):
    whole, split = tmp_path / "whole", tmp_path / "split"
    common = ["--env", POINT_MASS, "--checkpoint-every", "100", "--eval-every", "200",
              "--agent.networks.vmin", "auto", "--agent.networks.vmax", "auto", *TINY]
    code, output = cli(["train", "--steps", "200", "--run-dir", str(whole), *common], capsys)
    assert code == 0, output
    assert "finished: 200 env steps" in output and "critic support auto: [" in output
    saved = json.loads((whole / "config.json").read_text())["config"]
    assert saved["env"] == POINT_MASS
    networks = saved["agent"]["networks"]
    # The recorded support, from the rewards the run says its random probe saw, by the documented rule
    # worked by hand: returns in [min(lo, lo/(1-γ)), max(hi, hi/(1-γ))] at γ = 0.99, then a quarter of
    # that span added below and the whole span above.
    announced = re.search(r"critic support auto: \[(\S+), (\S+)\] \(60 random steps saw rewards in "
                          r"\[(\S+), (\S+)\]", " ".join(output.split()))
    assert announced, output
    vmin, vmax, low, high = map(float, announced.groups())
    returns_low, returns_high = min(low, low / 0.01), max(high, high / 0.01)
    span = max(returns_high - returns_low, 1.0)
    assert (networks["vmin"], networks["vmax"]) == pytest.approx(
        (returns_low - span / 4, returns_high + span), rel=1e-3)  # the rewards are printed to 4 digits
    assert (networks["vmin"], networks["vmax"]) == pytest.approx((vmin, vmax), rel=1e-5)  # as announced
    assert "critic/edge_mass" in (whole / "logs" / "learner" / "logs.csv").read_text().splitlines()[0]

    code, output = cli(["train", "--steps", "100", "--run-dir", str(split), *common], capsys)
    assert code == 0, output
    code, output = cli(["train", "--resume", str(split), "--steps", "200", "--no-progress"], capsys)
    assert code == 0, output
    assert "critic support auto" not in output  # the recorded numbers are used, nothing re-derived
    assert read_column(split, "environment_loop", "episode_return") == read_column(
        whole, "environment_loop", "episode_return")
    from dmpo.agent.policies.snapshot import load_policy

    for a, b in zip(jax.tree_util.tree_leaves(load_policy(whole).params),
                    jax.tree_util.tree_leaves(load_policy(split).params), strict=True):
        np.testing.assert_array_equal(a, b)

    code, output = cli(["eval", str(whole), "--episodes", "1"], capsys)
    assert code == 0 and f"{POINT_MASS}: return" in output, output
    # The episodes' curve (ten 20-step episodes; the run's one evaluation would be a single point).
    png = tmp_path / "curves.png"
    code, output = cli(["plot", str(whole), "-o", str(png), "--label", "environment_loop"], capsys)
    assert code == 0, output
    assert_curves_drawn(png, ["C0"])


@pytest.mark.ray
def test_entry_point_trains_with_actors(tmp_path):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "dmpo.cli", "train", "--actors", "1", "--steps", "200",
               "--run-dir", str(run), "--env", POINT_MASS, *TINY]
    # Ray's own folder: a private one, so that a cluster another process runs on this machine (its
    # /tmp/ray/ray_current_cluster) is not taken for ours.
    ray_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO,
                              env={"PATH": "/usr/bin:/bin", "MUJOCO_GL": "egl", "RAY_TMPDIR": ray_dir,
                                   **{k: os.environ[k] for k in ("JAX_COMPILATION_CACHE_DIR",
                                                                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}})
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished:" in done.stdout
    assert json.loads((run / "config.json").read_text())["config"]["env"] == POINT_MASS


# -- the 'auto' critic support -----------------------------------------------------------------------

def test_auto_support_from_declared_reward_bounds():
    environment = make("dmc:cartpole-swingup", seed=0)
    config, line = resolve_support(tiny_config("dmc:cartpole-swingup", vmin="auto", vmax="auto"), None,
                                   environment)
    assert (config.agent.networks.vmin, config.agent.networks.vmax) == (0.0, pytest.approx(100.0))
    assert "declared" in line
    # A dm_env reward spec [0, 1] with action repeat 3: rewards in [0, 3], returns in [0, 3/(1 - 0.9)].
    name = f"{ENVS}:make_bounded_reward"
    base = tiny_config(name, vmin="auto", vmax=50.0)
    base = dataclasses.replace(base, action_repeat=3, agent=dataclasses.replace(
        base.agent, learner=dataclasses.replace(base.agent.learner, discount=0.9)))
    config, _ = resolve_support(base, None, make(name, seed=0, action_repeat=3))
    assert (config.agent.networks.vmin, config.agent.networks.vmax) == (0.0, 50.0)
    base = dataclasses.replace(base, agent=dataclasses.replace(
        base.agent, networks=dataclasses.replace(base.agent.networks, vmax="auto")))
    assert resolve_support(base, None, make(name, seed=0, action_repeat=3))[0].agent.networks.vmax == (
        pytest.approx(30.0))


def test_auto_support_from_observed_rewards():
    name = f"{ENVS}:make_known_rewards"  # rewards -3, 5, 1 repeating, no declared range
    config, line = resolve_support(tiny_config(name, vmin="auto", vmax="auto"), TaskFactory(name),
                                   make(name, seed=0))
    # Returns of rewards in [-3, 5] at discount 0.99 lie in [-300, 500] (span 800); the documented
    # widening is a quarter of the span below (-500) and the whole span above (1300).
    assert config.agent.networks.vmin == pytest.approx(-500.0)
    assert config.agent.networks.vmax == pytest.approx(1300.0)
    assert "random steps saw rewards in [-3, 5]" in line


def test_auto_is_a_validated_config_value():
    assert NetworkConfig(vmin="auto").vmin == "auto"
    for bad in ("automatic", float("nan"), True):
        with pytest.raises(ConfigError, match="NetworkConfig.vmin"):
            NetworkConfig(vmin=bad)
    with pytest.raises(ValueError, match="must be resolved"):
        from dmpo.agent.networks import make_support

        make_support(NetworkConfig(vmax="auto"))


# -- the edge-mass metric and its warning ---------------------------------------------------------------

def test_edge_mass_is_exact_on_constructed_targets():
    support = jnp.array([-1.0, 0.0, 1.0])
    probs = jnp.array([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.6, 0.4, 0.0]])
    reward = jnp.array([0.0, 1.5, 0.5, -0.5])
    discount = jnp.array([1.0, 0.0, 0.0, 1.0])
    # Row 0: the target is the support itself: edges hold 0.2 + 0.5, nothing outside.
    # Row 1: every atom at 1.5 > vmax: all mass outside, clipped onto the top edge.
    # Row 2: every atom at 0.5: half on atom 0.0, half on the top edge; nothing outside.
    # Row 3: atoms at -1.5 (0.6, outside), -0.5 (0.4: half each on -1 and 0), 0.5 (0): edge 0.8.
    edge, outside = support_edge_mass(reward, discount, probs, support)
    assert float(edge) == pytest.approx((0.7 + 1.0 + 0.5 + 0.8) / 4, abs=1e-6)
    assert float(outside) == pytest.approx((0.0 + 1.0 + 0.0 + 0.6) / 4, abs=1e-6)


def test_support_monitor_warns_once_when_mass_stays_outside(capsys):
    monitor = SupportMonitor(-150.0, 150.0)
    high = {"critic/outside_mass": THRESHOLD + 0.2}
    for _ in range(ROWS - 1):
        monitor.observe(high)
    monitor.observe({"critic/outside_mass": THRESHOLD / 2})  # a row below starts the count again
    for _ in range(ROWS - 1):
        monitor.observe(high)
    assert monitor.warning is None
    monitor.observe(high)
    for _ in range(3):
        monitor.observe(high)
    err = capsys.readouterr().err
    assert err.count("returns exceed the critic's support [-150, 150]") == 1
    assert "set --agent.networks.vmin/vmax" in err


def test_pipeline_factory_keeps_pipeline_environments_as_they_are():
    from dmpo.envs.checks import CheckedEnvironment
    from dmpo.envs.gym_adapter import GymnasiumEnvironment

    environment = PipelineFactory(TaskFactory("gym:Pendulum-v1"))(0)  # not wrapped a second time
    assert isinstance(environment.environment.environment, CheckedEnvironment)
    assert isinstance(environment.environment.environment.environment, GymnasiumEnvironment)
