"""Train DMPO on an environment of your own: a gymnasium.Env subclass given to `dmpo.train` as a factory.

    python examples/own_environment.py                    # 20,000 env steps, into runs/point-mass
    python examples/own_environment.py --steps 2000 --run-dir "$OUT/point-mass"

`env_factory(seed)` may return a `gymnasium.Env` or a `dm_env.Environment`; dmpo wraps it in its task
pipeline (actions rescaled to [-1, 1], float32 observations) and checks it before training, as
`dmpo check-env` does. From the command line the same environment is `--env
examples.own_environment:make_env` (run from the repository root, so that `examples` is importable).
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import dmpo


class PointMass(gym.Env):
    """A point on a line, pushed by a force in [-1, 1], rewarded for staying near the origin.

    Observation: position and velocity. An episode lasts 100 steps (truncated, not terminated),
    and each reward is in [-1, 0], so every return lies in [-100, 0]."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self._state = np.zeros(2)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._state = np.array([self.np_random.uniform(-1.0, 1.0), 0.0])
        self._steps = 0
        return self._state.copy(), {}

    def step(self, action):
        force = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1.0, 1.0))
        position, velocity = self._state
        velocity = 0.9 * velocity + 0.1 * force
        position = float(np.clip(position + 0.1 * velocity, -2.0, 2.0))
        self._state = np.array([position, velocity])
        self._steps += 1
        reward = -min(abs(position), 1.0)
        return self._state.copy(), reward, False, self._steps >= 100, {}


def make_env(seed: int) -> gym.Env:
    """The factory dmpo calls, once per environment it needs (training, evaluation), with a seed."""
    del seed  # the pipeline seeds the environment through reset(seed=...)
    return PointMass()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps to train (default: %(default)s)")
    parser.add_argument("--run-dir", default="runs/point-mass",
                        help="a new run folder (default: %(default)s)")
    args = parser.parse_args(argv)
    # Returns lie in [-100, 0]: a critic support that covers them (or vmin/vmax "auto", which probes
    # the task with random steps first). Small networks suffice for a 2-number observation.
    networks = dmpo.NetworkConfig(policy_layer_sizes=(64, 64), critic_layer_sizes=(64, 64),
                                  vmin=-100.0, vmax=0.0)
    agent = dmpo.DMPOConfig(batch_size=64, min_replay_size=min(1000, args.steps // 2),
                            samples_per_insert=32.0, networks=networks)
    config = dmpo.TrainConfig(steps=args.steps, eval_every=args.steps, eval_episodes=2, agent=agent)
    summary = dmpo.train(config, args.run_dir, env_factory=make_env, progress=False)
    print(f"{summary['run_dir']}: evaluation return {summary['last_eval']['return_mean']:.1f} "
          f"after {summary['env_steps']} env steps")
    return summary


if __name__ == "__main__":
    main()
