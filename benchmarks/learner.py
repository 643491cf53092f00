"""Learner throughput: updates per second and achieved FLOP rate versus this machine's matmul rate.

Usage: .venv/bin/python benchmarks/learner.py [--rounds 5] [--steps 10] [--sizes default small]
       [--profile]

For each size it compiles one update, counts its FLOPs twice — XLA's own cost analysis of the compiled
update, and a hand count of the dense-layer matmuls (forward, weight gradients, input gradients) — and
then alternates, round by round, a timing of the f32 matmul 5120×512 @ 512×512 in JAX with a timing of
`--steps` updates, so that both see the same machine load (other processes share these CPUs). The
fraction reported is (hand-counted matmul FLOPs / update time) / (matmul FLOP rate of the same round);
the table gives the median over rounds. `--profile` also times the parts of one update separately.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from dm_env import specs

from dmpo.config import LearnerConfig, NetworkConfig
from dmpo.learning import bootstrap, critic_loss, init_training_state, make_update_fn, policy_loss
from dmpo.networks import make_networks
from dmpo.types import EnvironmentSpec, Transition

OBSERVATION_DIM, ACTION_DIM = 24, 6  # walker


@dataclasses.dataclass(frozen=True)
class Size:
    name: str
    batch: int
    num_samples: int
    policy: tuple[int, ...]
    critic: tuple[int, ...]
    atoms: int = 51


SIZES = {
    "default": Size("default", 256, 20, (256, 256, 256), (512, 512, 256)),
    "small": Size("small", 64, 8, (64, 64), (128, 128)),
}


def env_spec() -> EnvironmentSpec:
    return EnvironmentSpec(
        observations=specs.Array((OBSERVATION_DIM,), np.float32),
        actions=specs.BoundedArray((ACTION_DIM,), np.float32, -1.0, 1.0),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )


def make_batch(batch: int, seed: int = 0) -> Transition:
    rng = np.random.default_rng(seed)
    return Transition(
        observation=rng.normal(size=(batch, OBSERVATION_DIM)).astype(np.float32),
        action=rng.uniform(-1, 1, size=(batch, ACTION_DIM)).astype(np.float32),
        reward=rng.uniform(0, 1, size=batch).astype(np.float32),
        discount=np.ones(batch, np.float32),
        next_observation=rng.normal(size=(batch, OBSERVATION_DIM)).astype(np.float32),
    )


def dense_flops(rows: int, layers: Sequence[tuple[int, int]], backward: bool, input_grad: bool) -> float:
    """Matmul FLOPs of a stack of dense layers on `rows` rows: forward 2·R·I·O per layer; backward adds
    the weight gradient (2·R·I·O) and the input gradient (2·R·I·O) except for the first layer when its
    input needs no gradient."""
    total = 0.0
    for index, (fan_in, fan_out) in enumerate(layers):
        per_pass = 2.0 * rows * fan_in * fan_out
        total += per_pass
        if backward:
            total += per_pass + (per_pass if (index > 0 or input_grad) else 0.0)
    return total


def hand_count(size: Size) -> float:
    """Matmul FLOPs of one update (the control networks: flatten observation network, no parameters)."""
    policy_layers = list(zip((OBSERVATION_DIM, *size.policy[:-1]), size.policy, strict=True))
    policy_layers += [(size.policy[-1], ACTION_DIM)] * 2  # mean and stddev heads
    critic_in = OBSERVATION_DIM + ACTION_DIM
    critic_layers = list(zip((critic_in, *size.critic[:-1]), size.critic, strict=True))
    critic_layers += [(size.critic[-1], size.atoms)]
    rows = size.batch
    return (dense_flops(rows, policy_layers, backward=False, input_grad=False)  # target policy at o'
            + dense_flops(rows * size.num_samples, critic_layers, backward=False, input_grad=False)  # Z'(a')
            + dense_flops(rows, critic_layers, backward=True, input_grad=False)  # online critic at (o, a)
            + dense_flops(rows, policy_layers, backward=True, input_grad=False))  # online policy at e'


def xla_flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else None
    return None if not analysis or "flops" not in analysis else float(analysis["flops"])


def time_calls(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of `fn` (its result is waited for once, after the last call)."""
    start = time.perf_counter()
    result = None
    for _ in range(calls):
        result = fn()
    jax.block_until_ready(result)
    return (time.perf_counter() - start) / calls


def matmul_rate(calls: int = 10) -> float:
    """f32 GFLOP/s of 5120×512 @ 512×512 in JAX."""
    x = jax.random.normal(jax.random.PRNGKey(0), (5120, 512))
    w = jax.random.normal(jax.random.PRNGKey(1), (512, 512))
    matmul = jax.jit(jnp.matmul)
    jax.block_until_ready(matmul(x, w))
    return 2 * 5120 * 512 * 512 / time_calls(lambda: matmul(x, w), calls) / 1e9


@dataclasses.dataclass
class Setup:
    size: Size
    update: Callable
    state: object
    batch: Transition
    compile_seconds: float
    xla: float | None
    hand: float
    networks: object
    config: LearnerConfig


def setup(size: Size) -> Setup:
    spec = env_spec()
    network_config = NetworkConfig(policy_layer_sizes=size.policy, critic_layer_sizes=size.critic,
                                   num_atoms=size.atoms)
    networks = make_networks(spec, network_config)
    config = LearnerConfig(num_samples=size.num_samples)
    state = jax.jit(lambda key: init_training_state(networks, spec, config, key))(jax.random.PRNGKey(0))
    batch = jax.device_put(make_batch(size.batch))
    start = time.perf_counter()
    compiled = make_update_fn(networks, config).lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    return Setup(size, compiled, state, batch, compile_seconds, xla_flops(compiled), hand_count(size),
                 networks, config)


def time_updates(run: Setup, steps: int) -> float:
    state, metrics = run.update(run.state, run.batch)  # warm
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = run.update(state, run.batch)
    jax.block_until_ready((state, metrics))
    return (time.perf_counter() - start) / steps


def profile(run: Setup, calls: int) -> dict[str, float]:
    """Milliseconds of the update's parts, each jitted alone (they overlap less than in the fused update)."""
    networks, config, state, batch = run.networks, run.config, run.state, run.batch
    key = jax.random.PRNGKey(0)
    def boot_fn(state, batch):
        return bootstrap(networks, state.target_params, batch.next_observation, key, config.num_samples)

    boot = jax.jit(boot_fn)
    boot_out = boot(state, batch)
    critic_grad = jax.jit(jax.grad(lambda p, b, t: critic_loss(networks, p, b, t, config.discount)))
    policy_grad = jax.jit(jax.grad(lambda p, d, t: policy_loss(networks, config, p, d, t)[0], argnums=(0, 1)))
    parts = {
        "bootstrap (target policy + N·B target critic)": lambda: boot(state, batch),
        "critic loss gradient": lambda: critic_grad(state.params, batch, boot_out.target_probs),
        "policy loss gradient": lambda: policy_grad(state.params, state.duals, boot_out),
        "whole update": lambda: run.update(state, batch),
    }
    for fn in parts.values():
        jax.block_until_ready(fn())
    return {name: 1e3 * time_calls(fn, calls) for name, fn in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sizes", nargs="+", default=["default", "small"], choices=sorted(SIZES))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.devices()[0].device_kind}), "
          f"{jax.local_device_count()} device(s); {os.cpu_count()} CPUs, load average before "
          f"{os.getloadavg()[0]:.1f}")
    rows = []
    for name in args.sizes:
        run = setup(SIZES[name])
        rates, times = [], []
        for _ in range(args.rounds):
            rates.append(matmul_rate())
            times.append(time_updates(run, args.steps))
        fractions = [run.hand / t / 1e9 / r for t, r in zip(times, rates, strict=True)]
        seconds = statistics.median(times)
        rows.append((run, seconds, statistics.median(rates), statistics.median(fractions), min(fractions),
                     max(fractions)))
        print(f"{name}: compile {run.compile_seconds:.1f} s; per round ms/update "
              f"{[round(1e3 * t, 1) for t in times]}, matmul GFLOP/s {[round(r) for r in rates]}")
        if args.profile:
            for part, ms in profile(run, args.steps).items():
                print(f"  {part:<48} {ms:8.2f} ms")

    print(f"\nload average after {os.getloadavg()[0]:.1f}")
    print("| sizes | B | N | policy | critic | updates/s | ms/update | GFLOP/update (XLA) | "
          "GFLOP/update (matmuls, hand) | achieved GFLOP/s | matmul GFLOP/s | fraction (min–max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run, seconds, rate, fraction, low, high in rows:
        size = run.size
        xla = "n/a" if run.xla is None else f"{run.xla / 1e9:.3f}"
        print(f"| {size.name} | {size.batch} | {size.num_samples} | {'-'.join(map(str, size.policy))} | "
              f"{'-'.join(map(str, size.critic))} | {1 / seconds:.1f} | {1e3 * seconds:.2f} | {xla} | "
              f"{run.hand / 1e9:.3f} | {run.hand / seconds / 1e9:.1f} | {rate:.1f} | "
              f"{fraction:.0%} ({low:.0%}–{high:.0%}) |")


if __name__ == "__main__":
    main()
