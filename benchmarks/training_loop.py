"""Environment steps per second of the whole single-process training loop.

Default DMPO settings on dmc:cartpole-swingup: acting, n-step adder, replay and learner steps on the
spec's schedule (one learner step per 8 environment steps). Each mode first fills replay to
`min_observations` (not timed: no learning happens there) and takes `WARMUP_STEPS` more (not timed:
the update is compiled there), then times `--steps` environment steps of real training. Modes run
alternately for `--rounds` rounds, so both see the same machine load.

    .venv/bin/python benchmarks/training_loop.py --steps 2000 --rounds 2
    .venv/bin/python benchmarks/training_loop.py --presets control fast --env dmc:walker-walk

With --presets, the modes are `dmpo train`'s agent presets (`dmpo.config.AGENT_PRESETS`, synchronous
learner), compared with the first one named.

The reference TF agent ran at 66–97 environment steps/s at these settings on this machine kind
(learner-bound), which the last column compares against (the midpoint, 81.5).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from dmpo.agent.core import DMPO
from dmpo.config import AGENT_PRESETS, DMPOConfig
from dmpo.envs import make, make_environment_spec
from dmpo.utils.counting import Counter

REFERENCE_STEPS_PER_SECOND = (66 + 97) / 2
# A multiple of every preset's env steps per jitted update call (8 for K = 4 at one update per 2 env steps).
WARMUP_STEPS = 64


def run_mode(overlap: bool, steps: int, seed: int, config: DMPOConfig | None = None,
             task: str = "dmc:cartpole-swingup") -> tuple[float, float]:
    env = make(task, seed=seed)
    config = config or DMPOConfig()
    counter = Counter(time_delta=0.0)
    agent = DMPO(make_environment_spec(env), config, seed=seed, counter=counter, overlap_learner=overlap)
    taken = 0
    timestep = env.reset()
    agent.observe_first(timestep)
    start = learner_start = None
    try:
        while taken < config.min_observations + WARMUP_STEPS + steps:
            if taken == config.min_observations + WARMUP_STEPS:
                start = time.perf_counter()
                learner_start = counter.get_counts().get("steps", 0)
            action = agent.select_action(timestep.observation)
            timestep = env.step(action)
            agent.observe(action, timestep)
            agent.update()
            taken += 1
            if timestep.last():
                timestep = env.reset()
                agent.observe_first(timestep)
        elapsed = time.perf_counter() - start
        learner_steps = counter.get_counts().get("steps", 0) - learner_start
    finally:
        agent.close()
    return steps / elapsed, learner_steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--presets", nargs="+", choices=list(AGENT_PRESETS), help="compare these presets")
    parser.add_argument("--env", default="dmc:cartpole-swingup")
    args = parser.parse_args()
    if args.presets:
        modes = {name: (False, AGENT_PRESETS[name]()) for name in args.presets}
    else:
        modes = {"synchronous": (False, None), "overlapped": (True, None)}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
    for round_index in range(args.rounds):
        for name, (overlap, config) in modes.items():
            results[name].append(run_mode(overlap, args.steps, round_index, config, args.env))
            print(f"round {round_index}: {name} {results[name][-1][0]:.1f} env steps/s", flush=True)
    print(f"\nmachine: {platform.processor() or platform.machine()}, task {args.env}, timed steps per "
          f"run: {args.steps}\n")
    first = next(iter(results))
    print(f"| mode | env steps/s (median) | learner updates/s | × reference TF (81.5) "
          f"| × {first}, same round (median) | min / 100k steps |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        env_rate = statistics.median(r[0] for r in rows)
        learner_rate = statistics.median(r[1] for r in rows)
        versus = statistics.median(r[0] / base[0] for r, base in zip(rows, results[first], strict=True))
        print(f"| {name} | {env_rate:.1f} | {learner_rate:.2f} | {env_rate / REFERENCE_STEPS_PER_SECOND:.2f} "
              f"| {versus:.2f} | {100_000 / env_rate / 60:.1f} |")


if __name__ == "__main__":
    main()
