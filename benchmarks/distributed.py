"""Distributed DMPO on a local Ray cluster: throughput, learner starvation, parameter fetch cost.

Usage: .venv/bin/python benchmarks/distributed.py [--actors 1 2 4] [--seconds 20] [--env dmc:cartpole-swingup]
       [--limiters ratio none] [--sizes small default] [--num-cpus N] [--skip-throughput]

Part 1 — for each number of actors, with the sample/insert ratio limiter (spi = 8) and without it
(`MinSize`): starts the whole program on one local cluster (no evaluator), waits until the learner has
compiled and stepped, then measures over `--seconds`: environment steps/s (all actors, from the
replay's insert count), learner updates/s, samples per insert achieved in that window, the fraction
of the learner's time spent waiting for a batch, and the fraction of actor time blocked on replay
inserts (backpressure). `--sizes` repeats it with the benchmark's small networks and the default
ones (policy 256×256×256, critic 512×512×256); each size also gets a single-process run in the same
round (`local` rows: the synchronous agent at the same samples per insert, one environment loop), so
the ratios of distributed to local throughput come from one machine state.

Part 2 — costs of one call: fetching policy variables through the learner's `VariablePublisher`
(hosted by a stand-in node holding numpy parameters of the benchmark's small networks and of the
default-size networks of algorithm.md §4.2): a new version (copied into the object store first) and the same
version again (served from the cache); one `insert_batch` of 32 items and one `sample` of 256 items
on the replay node, and how many of each the replay node completes per second with several calls kept
in flight (a ceiling for one Python table node on this machine).

Settings are small but real (cartpole swing-up from dm_control, 64×64 policy, 128×128 critic,
51 atoms, batch 64, 8 action samples), so the whole script takes a few minutes on 2 cores. Every
actor, the learner and the replay node share this machine's cores: the figures show how the parts
compete on one box, not what a cluster would do (see the scaling estimate in docs/results/distributed.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import ray  # noqa: E402

from dmpo.agent.builder import DMPOBuilder  # noqa: E402
from dmpo.config import DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig  # noqa: E402
from dmpo.distributed import DistributedProgram, ProgramOptions, start_local_cluster  # noqa: E402
from dmpo.replay import MinSize, transition_signature  # noqa: E402
from dmpo.run.distributed.replay_service import ReplayServiceConfig, make_replay_service  # noqa: E402
from dmpo.run.distributed.variables import VariablePublisher  # noqa: E402
from dmpo.run.run import Run  # noqa: E402

EPISODE_STEPS = 1000  # control-suite episodes (the benchmark's tasks)
SMALL = DMPOConfig(
    batch_size=64, min_replay_size=500, max_replay_size=100_000, samples_per_insert=8.0, n_step=5,
    learner=LearnerConfig(num_samples=8),
    networks=NetworkConfig(policy_layer_sizes=(64, 64), critic_layer_sizes=(128, 128)))


def _counts_and_stats(program: DistributedProgram) -> tuple[Any, Any, Any, Any]:
    """Counter totals, learner stats, per-actor stats and replay stats, read now."""
    counts = ray.get(program.counter.get_counts.remote())
    learner = ray.get(program.learner.stats.remote())
    actors = ray.get([handle.stats.remote() for handle in program.actor_handles])
    replay = ray.get(program.replay.stats.remote())
    return counts, learner, actors, replay


SIZES = {"small": SMALL.networks, "default": NetworkConfig()}


def agent_config(size: str) -> DMPOConfig:
    return dataclasses.replace(SMALL, networks=SIZES[size])


def measure_single_process(env: str, size: str, seconds: float) -> dict[str, float]:
    """The synchronous agent in this process: env steps/s and updates/s over `seconds` once learning."""
    from dmpo.agent.core import DMPO
    from dmpo.agent.environment_loop import EnvironmentLoop
    from dmpo.envs import make, make_environment_spec
    from dmpo.reporting.logging import NoOpLogger
    from dmpo.utils.counting import Counter

    environment = make(env, seed=0)
    counter = Counter(time_delta=0.0)
    learner_counter = Counter(counter, prefix="learner", time_delta=0.0)
    config = dataclasses.replace(agent_config(size), checkpoint=False)
    agent = DMPO(make_environment_spec(environment), config, seed=0, counter=learner_counter)
    window: dict[str, float] = {}

    def stop() -> bool:
        counts = counter.get_counts()
        if "start" not in window and counts.get("learner_steps", 0) >= 20:  # compiled and stepping
            window.update(start=time.monotonic(), steps=counts.get("actor_steps", 0),
                          updates=counts["learner_steps"])
        return "start" in window and time.monotonic() - window["start"] >= seconds

    loop = EnvironmentLoop(environment, agent, Counter(counter, prefix="actor", time_delta=0.0), NoOpLogger(),
                           should_stop=stop)
    while not stop():  # the loop checks between episodes: run episodes until the window is over
        loop.run(num_episodes=1)
    elapsed = time.monotonic() - window["start"]
    counts = counter.get_counts()
    agent.close()
    return {"env_steps_per_s": (counts["actor_steps"] - window["steps"]) / elapsed,
            "learner_steps_per_s": (counts["learner_steps"] - window["updates"]) / elapsed}


def measure_throughput(env: str, num_actors: int, limiter: str, seconds: float,
                       size: str = "small") -> dict[str, float]:
    config = agent_config(size)
    config = config if limiter == "ratio" else dataclasses.replace(config, samples_per_insert=None)
    options = ProgramOptions(variable_update_period=1000, log_time_delta=10.0)
    train = TrainConfig(env=env, steps=10**9, actors=num_actors, eval_every=0, checkpoint_every=0, seed=0,
                        agent=dataclasses.replace(config, checkpoint=False))
    with tempfile.TemporaryDirectory() as run_dir:
        run = Run(train, Path(run_dir) / "run", progress=False, quiet=True)
        run.open()  # the run's folder and lock; the program is driven here, pass by pass
        program = DistributedProgram(run, options=options)
        program.start()
        try:
            deadline = time.monotonic() + 600
            while ray.get(program.learner.ping.remote()) < 20:  # compiled and stepping
                if time.monotonic() > deadline:
                    raise TimeoutError("the learner did not start within 10 minutes")
                program.poll()
                time.sleep(0.5)
            _, l0, a0, r0 = _counts_and_stats(program)
            t0 = time.monotonic()
            time.sleep(seconds)
            _, l1, a1, r1 = _counts_and_stats(program)
            elapsed = time.monotonic() - t0
        finally:
            program.stop()
            run.close()
    # Actors count their steps at episode ends (1000 steps here); the replay's insert count moves with
    # every step (an episode of T steps inserts T + n − 1 items), so it measures the step rate.
    env_steps = (r1.inserts - r0.inserts) * EPISODE_STEPS / (EPISODE_STEPS + config.n_step - 1)
    blocked = sum(b["insert_blocked_seconds"] - a["insert_blocked_seconds"]
                  for a, b in zip(a0, a1, strict=True))
    inserts, samples = r1.inserts - r0.inserts, r1.samples - r0.samples
    return {
        "env_steps_per_s": env_steps / elapsed,
        "learner_steps_per_s": (l1["steps"] - l0["steps"]) / elapsed,
        "samples_per_insert": samples / inserts if inserts else float("nan"),
        "learner_wait_fraction": (l1["data_wait_seconds"] - l0["data_wait_seconds"])
                                 / max(l1["run_seconds"] - l0["run_seconds"], 1e-9),
        "actor_blocked_fraction": blocked / (elapsed * num_actors),
    }


class ParamsHolder:
    """Stand-in learner: publishes a fixed numpy pytree; `bump()` makes the next request a new version."""

    def __init__(self, params: Any) -> None:
        self.version = 0
        self._params = params
        self._publisher = VariablePublisher(lambda: self._params, lambda: self.version)

    def get_variables(self) -> tuple[int, list[Any]]:
        return self._publisher.get()

    def bump(self) -> None:
        self.version += 1


def _fetch(handle: Any) -> Any:
    _, (ref,) = ray.get(handle.get_variables.remote())
    return ray.get(ref)


def _time_calls(call: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _tree_bytes(tree: Any) -> int:
    import jax

    return sum(np.asarray(leaf).nbytes for leaf in jax.tree_util.tree_leaves(tree))


def measure_call_costs(env: str, repeats: int = 30) -> dict[str, float]:
    import jax

    from dmpo.agent.networks import PolicyParams, init_params, make_networks
    from dmpo.envs import make, make_environment_spec

    env_spec = make_environment_spec(make(env, seed=0))
    results: dict[str, float] = {}
    for name, network_config in (("small", SMALL.networks), ("default", NetworkConfig())):
        networks = make_networks(env_spec, network_config)
        params = jax.device_get(init_params(networks, env_spec, jax.random.PRNGKey(0)))
        policy = PolicyParams(params.observation, params.policy)
        holder = ray.remote(num_cpus=0, max_concurrency=2)(ParamsHolder).remote(policy)
        _fetch(holder)
        results[f"fetch_{name}_cached_ms"] = 1e3 * _time_calls(lambda h=holder: _fetch(h), repeats)

        def new_version(h: Any = holder) -> Any:
            ray.get(h.bump.remote())
            return _fetch(h)

        bump_only = _time_calls(lambda h=holder: ray.get(h.bump.remote()), repeats)
        results[f"fetch_{name}_new_version_ms"] = 1e3 * (_time_calls(new_version, repeats) - bump_only)
        results[f"params_{name}_bytes"] = float(_tree_bytes(policy))
        ray.kill(holder)

    signature = transition_signature(env_spec)
    builder = DMPOBuilder(dataclasses.replace(SMALL, max_replay_size=100_000), env_spec)
    replay = make_replay_service(builder, ReplayServiceConfig(rate_limiter=MinSize(1)))

    def batch(count: int) -> Any:
        return jax.tree_util.tree_map(lambda spec: np.zeros((count, *spec.shape), spec.dtype), signature)

    items = batch(32)
    ray.get(replay.insert_batch.remote(items))
    insert = lambda: ray.get(replay.insert_batch.remote(items))
    results["insert_batch_32_ms"] = 1e3 * _time_calls(insert, repeats)
    results["sample_256_ms"] = 1e3 * _time_calls(lambda: ray.get(replay.sample.remote(256)), repeats)
    results["item_bytes"] = float(ray.get(replay.stats.remote()).bytes_per_item)
    results["insert_batch_32_calls_per_s"] = _calls_per_second(lambda: replay.insert_batch.remote(items), 16)
    results["sample_256_calls_per_s"] = _calls_per_second(lambda: replay.sample.remote(256), 4)
    ray.kill(replay)
    return results


def _calls_per_second(send: Any, in_flight: int, seconds: float = 3.0) -> float:
    """Completed calls per second with `in_flight` calls kept outstanding from this process."""
    pending = [send() for _ in range(in_flight)]
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)
        done += len(ready)
        pending.append(send())
    ray.get(pending)
    return done / (time.perf_counter() - start)


def print_throughput_table(args: argparse.Namespace) -> None:
    header = ("networks", "actors", "limiter", "env steps/s", "updates/s", "spi seen", "learner waits",
              "actors blocked")
    print("  ".join(f"{h:>14}" for h in header))
    for size in args.sizes:
        local = measure_single_process(args.env, size, args.seconds)
        cells = [size, "local", "schedule", f"{local['env_steps_per_s']:.0f}",
                 f"{local['learner_steps_per_s']:.1f}", "", "", ""]
        print("  ".join(f"{cell:>14}" for cell in cells), flush=True)
        for limiter in args.limiters:
            for num_actors in args.actors:
                row = measure_throughput(args.env, num_actors, limiter, args.seconds, size)
                cells = [size, str(num_actors), limiter, f"{row['env_steps_per_s']:.0f}",
                         f"{row['learner_steps_per_s']:.1f}", f"{row['samples_per_insert']:.2f}",
                         f"{row['learner_wait_fraction']:.1%}", f"{row['actor_blocked_fraction']:.1%}"]
                print("  ".join(f"{cell:>14}" for cell in cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--limiters", nargs="+", default=["ratio", "none"], choices=["ratio", "none"])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--sizes", nargs="+", default=["small"], choices=list(SIZES))
    parser.add_argument("--env", default="dmc:cartpole-swingup")
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()

    started = time.monotonic()
    cluster = start_local_cluster(args.num_cpus)
    print(f"cluster {cluster.address}: {ray.cluster_resources().get('CPU', 0):.0f} CPUs, "
          f"{cluster.num_gpus:.0f} GPUs; task {args.env}")
    try:
        if not args.skip_throughput:
            print(f"\nthroughput over {args.seconds:.0f} s windows "
                  f"(limiter: spi = {SMALL.samples_per_insert}, or none = MinSize):")
            print_throughput_table(args)
        print("\ncall costs (median of 30):")
        for key, value in measure_call_costs(args.env).items():
            print(f"  {key:32s} {value:12.3f}")
    finally:
        ray.shutdown(wait_for_processes=True)
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
