"""Serve an exported policy with onnxruntime alone: no dmpo, no JAX, only onnxruntime, numpy, gymnasium.

    dmpo train --env gym:Pendulum-v1 --steps 20000 --run-dir runs/pendulum
    dmpo export runs/pendulum --format onnx -o policy.onnx       # needs the export extra
    python examples/serve_onnx.py policy.onnx --episodes 3

The file's metadata says what the policy needs (docs/export.md): the task it was trained on, the
action bounds and the action repeat. This script runs it on that gymnasium task (state observations;
for a dm_control or pixel task, build the observation as docs/export.md describes) and prints each
episode's return.
"""

from __future__ import annotations

import argparse
import json

import gymnasium
import numpy as np
import onnxruntime


class OnnxPolicy:
    """`policy(observation) -> action` from an ONNX file written by `dmpo export --format onnx`."""

    def __init__(self, path: str) -> None:
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        meta = self.session.get_modelmeta().custom_metadata_map
        self.env = meta["env"]
        self.low = np.array(json.loads(meta["action_minimum"]), np.float32)
        self.high = np.array(json.loads(meta["action_maximum"]), np.float32)
        self.repeat = int(meta["action_repeat"])
        if json.loads(meta["pixels"]):
            raise SystemExit(f"{path}: a pixel policy; this script feeds state observations only")

    def __call__(self, observation: np.ndarray) -> np.ndarray:
        batch = np.asarray(observation, np.float32).reshape(1, -1)  # a Box observation, flattened
        (actions,) = self.session.run(["action"], {"observation": batch})
        return np.clip(actions[0], self.low, self.high)  # inside the bounds already; the clip guards


def run_episode(policy: OnnxPolicy, env: gymnasium.Env, seed: int) -> float:
    observation, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action = policy(observation)
        for _ in range(policy.repeat):  # each action is sent `action_repeat` times, as in training
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
            if done:
                break
    return total


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an ONNX file from `dmpo export --format onnx`")
    parser.add_argument("--episodes", type=int, default=3, help="episodes to run (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the first episode (default: %(default)s)")
    args = parser.parse_args(argv)
    policy = OnnxPolicy(args.model)
    if not policy.env.startswith("gym:"):
        parser.error(f"{args.model} was trained on {policy.env}; this script runs gymnasium (gym:) tasks")
    env = gymnasium.make(policy.env.split(":")[-1])
    returns = [run_episode(policy, env, args.seed + episode) for episode in range(args.episodes)]
    for episode, value in enumerate(returns):
        print(f"episode {episode} (seed {args.seed + episode}): return {value:.1f}")
    return returns


if __name__ == "__main__":
    main()
