"""Environment steps per second of lockstep acting against the number of environments N.

Two parts, in one run so that the ratios see the same machine load:

* learner off (pure acting): `BatchedActor` + `EnvironmentLoop` + one n-step adder per
  environment into a real replay table, default networks, for states and for pixels (84×84, frame
  stack 3, IMPALA torso). Each N runs one whole episode per environment (dm_control episodes have
  a fixed length, so all environments end together) after one untimed policy call that compiles.
* learner on: the single-process agent (`DMPO(num_envs=N)`, synchronous learner) with the named
  presets, states. Untimed episodes fill replay past `min_observations` and compile the update,
  then whole episodes are timed (at least `--timed-steps` environment steps). Action repeat 8 (125
  agent steps per episode) and `min_replay_size` 256 keep these runs short; the learner then runs
  on the preset's schedule (control: one update per 8 env steps, fast: 4 per 8).

Columns: env steps/s, its ratio to N = 1 of the same row group, and the policy call's share of the
loop's time (`EnvironmentLoop.select_seconds` / wall time; the rest is `env.step`, the adders
and replay). With the learner on, JAX dispatches each update asynchronously and the next policy
call waits for the parameters it produces, so that share also holds the learner's time.

    .venv/bin/python benchmarks/acting.py
    .venv/bin/python benchmarks/acting.py --num-envs 1 4 --presets control --no-pixels
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import time

import numpy as np

from dmpo.agent.acting import stack_observations
from dmpo.agent.builder import DMPOBuilder
from dmpo.agent.environment_loop import EnvironmentLoop
from dmpo.config import AGENT_PRESETS, TrainConfig
from dmpo.envs import make, make_environment_spec
from dmpo.reporting.logging import NoOpLogger
from dmpo.utils.counting import Counter
from dmpo.utils.seeds import lockstep_env_seeds


def _close(environments) -> None:
    for environment in environments:
        close = getattr(environment, "close", None)
        if close is not None:
            close()


def pure_acting(task: str, num_envs: int, pixels: bool, seed: int = 0) -> tuple[float, float]:
    """(env steps/s, policy share) for one whole episode per environment, learner off."""
    config = TrainConfig(env=task, pixels=pixels).resolved()
    environments = [make(task, seed=s, pixels=pixels) for s in lockstep_env_seeds(seed, num_envs)]
    spec = make_environment_spec(environments[0])
    builder = DMPOBuilder(config.agent, spec)
    import jax

    from dmpo.agent.networks import PolicyParams, init_params

    params = init_params(builder.networks, spec, jax.random.PRNGKey(seed))
    table = builder.make_table(builder.make_rate_limiter("local"), seed=seed)
    actor = builder.make_actor(lambda: PolicyParams(params.observation, params.policy), seed=seed,
                               adders=builder.make_adders(table, num_envs))
    first = [environment.reset() for environment in environments]
    actor.select_actions(stack_observations([ts.observation for ts in first]))  # compiles; not timed
    loop = EnvironmentLoop(environments, actor, Counter(time_delta=0.0), NoOpLogger())
    start = time.perf_counter()
    steps = loop.run(num_steps=1)  # stops at the first episode end: all end together on dm_control
    elapsed = time.perf_counter() - start
    _close(environments)
    return steps / elapsed, loop.select_seconds / elapsed


def learning(task: str, num_envs: int, preset: str, timed_steps: int, seed: int = 0) -> tuple[float, float]:
    """(env steps/s, policy share) of the synchronous single-process agent with `preset`."""
    from dmpo.agent.core import DMPO

    agent_config = dataclasses.replace(AGENT_PRESETS[preset](), min_replay_size=256)
    environments = [make(task, seed=s, action_repeat=8) for s in lockstep_env_seeds(seed, num_envs)]
    agent = DMPO(make_environment_spec(environments[0]), agent_config, seed=seed, num_envs=num_envs)
    counter = Counter(time_delta=0.0)
    try:
        warm = EnvironmentLoop(environments, agent, counter, NoOpLogger())
        while agent.num_observations < agent_config.min_observations + 64:
            warm.run(num_steps=1)  # whole episodes: replay filled, the update compiled
        loop = EnvironmentLoop(environments, agent, counter, NoOpLogger())
        start = time.perf_counter()
        steps = loop.run(num_steps=timed_steps)
        elapsed = time.perf_counter() - start
    finally:
        agent.close()
        _close(environments)
    return steps / elapsed, loop.select_seconds / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="dmc:cartpole-swingup")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--presets", nargs="*", default=["control", "fast"], choices=list(AGENT_PRESETS))
    parser.add_argument("--timed-steps", type=int, default=500)
    parser.add_argument("--no-pixels", action="store_true")
    args = parser.parse_args()
    rows = []
    groups = [("learner off, states", lambda n: pure_acting(args.env, n, False))]
    if not args.no_pixels:
        groups.append(("learner off, pixels", lambda n: pure_acting(args.env, n, True)))
    for preset in args.presets:
        groups.append((f"learner on ({preset}), states, action repeat 8",
                       lambda n, p=preset: learning(args.env, n, p, args.timed_steps)))
    for name, measure in groups:
        baseline = math.nan
        for n in args.num_envs:
            rate, share = measure(n)
            baseline = rate if n == args.num_envs[0] else baseline
            rows.append((name, n, rate, rate / baseline, share))
            print(f"{name:48s} N={n:3d} {rate:9.1f} env steps/s  x{rate / baseline:5.2f}  "
                  f"policy {share:5.1%}", flush=True)
    print(f"\n{args.env}, {platform.processor() or platform.machine()}, numpy {np.__version__}")
    print("| mode | N | env steps/s | vs N = " + str(args.num_envs[0]) + " | policy call share |")
    print("|---|---:|---:|---:|---:|")
    for name, n, rate, ratio, share in rows:
        print(f"| {name} | {n} | {rate:.0f} | {ratio:.2f}x | {share:.0%} |")


if __name__ == "__main__":
    main()
