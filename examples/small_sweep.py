"""A small sweep in one process: one setting's grid times a few seeds, each a `dmpo.train` run; a table.

    python examples/small_sweep.py                         # num_samples 10 and 20, seeds 0 1, 20k env steps
    python examples/small_sweep.py --steps 2000 --out "$OUT/sweep" --seeds 0

Every run gets its own folder, `OUT/num_samples-<N>/seed-<S>`, which the table names. `dmpo sweep`
does the same on Ray Tune, with runs side by side, resumable as a whole, intervals over seeds and
Optuna searches (docs/sweeps.md); this script's grid there is

    dmpo sweep sweeps/pendulum --seeds 0 1 --grid agent.learner.num-samples=10,20 -- --env gym:Pendulum-v1
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

import dmpo


def main(argv: list[str] | None = None) -> dict[int, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (default: 0 1)")
    parser.add_argument("--num-samples", type=int, nargs="+", default=[10, 20],
                        help="the grid: actions sampled per state by the learner (default: 10 20)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"),
                        help="a new folder (default: %(default)s)")
    args = parser.parse_args(argv)

    base = dmpo.TrainConfig(env="gym:Pendulum-v1", steps=args.steps, eval_every=args.steps, eval_episodes=2)
    small = dmpo.NetworkConfig(policy_layer_sizes=(64, 64), critic_layer_sizes=(64, 64),
                               vmin=-1650.0, vmax=0.0)
    results: dict[int, list[float]] = {}
    for num_samples in args.num_samples:
        learner = dataclasses.replace(base.agent.learner, num_samples=num_samples)
        agent = dataclasses.replace(base.agent, learner=learner, networks=small,
                                    min_replay_size=min(1000, args.steps // 2))
        for seed in args.seeds:
            config = dataclasses.replace(base, seed=seed, agent=agent)
            run_dir = args.out / f"num_samples-{num_samples}" / f"seed-{seed}"
            summary = dmpo.train(config, run_dir, quiet=True)
            results.setdefault(num_samples, []).append(summary["last_eval"]["return_mean"])

    print("| num_samples | seeds | final return: mean | per seed |")
    print("|---:|---|---:|---|")
    for num_samples, returns in results.items():
        print(f"| {num_samples} | {', '.join(map(str, args.seeds))} | {np.mean(returns):.1f} "
              f"| {', '.join(f'{r:.1f}' for r in returns)} |")
    return results


if __name__ == "__main__":
    main()
