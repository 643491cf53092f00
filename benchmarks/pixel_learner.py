"""Pixel learner throughput on CPU: updates per second with the IMPALA and DrQ torsos.

    .venv/bin/python benchmarks/pixel_learner.py [--batch 256] [--steps 3] [--rounds 2]

Observations are uint8 84×84×9 (3 stacked RGB frames), 6-dim actions (cheetah), N = 20 sampled
actions, 51 atoms; networks are the reference's pixel networks (algorithm.md §4.3 IMPALA with control-suite
MLPs, §4.4 DrQ-v2 with its 50-unit embedding and 1024-unit MLPs), with the DrQ per-image random shift
inside the update. The state-network update at the same batch runs in the same rounds as the
baseline, so the ratio says what pixels cost on this machine whatever its load.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np
from dm_env import specs

from dmpo.agent.learning import init_training_state, make_update_fn
from dmpo.agent.networks import make_networks, pixel_network_config
from dmpo.config import LearnerConfig, NetworkConfig
from dmpo.types import EnvironmentSpec, Transition

ACTION_DIM = 6


def spec(pixels: bool) -> EnvironmentSpec:
    observation = (specs.Array((84, 84, 9), np.uint8) if pixels else specs.Array((24,), np.float32))
    return EnvironmentSpec(observation, specs.BoundedArray((ACTION_DIM,), np.float32, -1.0, 1.0),
                           specs.Array((), np.float32), specs.BoundedArray((), np.float32, 0.0, 1.0))


def batch(env_spec: EnvironmentSpec, size: int, rng: np.random.Generator) -> Transition:
    shape = (size, *env_spec.observations.shape)
    if env_spec.observations.dtype == np.uint8:
        observation = lambda: rng.integers(0, 256, shape, dtype=np.uint8)  # noqa: E731
    else:
        observation = lambda: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return Transition(observation(), rng.uniform(-1, 1, (size, ACTION_DIM)).astype(np.float32),
                      rng.uniform(size=size).astype(np.float32), np.ones(size, np.float32), observation())


def make_case(name: str, batch_size: int):
    if name == "states":
        env_spec, networks_config, learner_config = spec(False), NetworkConfig(), LearnerConfig()
    else:
        env_spec = spec(True)
        networks_config = pixel_network_config(name)
        learner_config = LearnerConfig(augmentation="image_shift")
    networks = make_networks(env_spec, networks_config)
    state = init_training_state(networks, env_spec, learner_config, jax.random.PRNGKey(0))
    update = make_update_fn(networks, learner_config, donate=True)
    data = jax.device_put(batch(env_spec, batch_size, np.random.default_rng(0)))
    state, metrics = update(state, data)  # compile
    jax.block_until_ready(metrics)
    return update, state, data


def time_updates(case, steps: int) -> tuple[float, object]:
    update, state, data = case
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = update(state, data)
    jax.block_until_ready(metrics)
    return (time.perf_counter() - start) / steps, (update, state, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    names = ("states", "impala", "drq")
    cases = {name: make_case(name, args.batch) for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            elapsed, cases[name] = time_updates(cases[name], args.steps)
            seconds[name].append(elapsed)
    print(f"batch {args.batch}, N=20, 51 atoms, {args.steps} updates × {args.rounds} rounds\n")
    print("| networks | ms/update (median) | updates/s | × state-network update time |")
    print("|---|---:|---:|---:|")
    base = statistics.median(seconds["states"])
    for name in names:
        median = statistics.median(seconds[name])
        print(f"| {name} | {1e3 * median:.0f} | {1 / median:.2f} | {median / base:.1f} |")


if __name__ == "__main__":
    main()
