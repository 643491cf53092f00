"""Learner throughput: updates per second and achieved FLOP rate versus this machine's matmul rate.

Usage: .venv/bin/python benchmarks/learner.py [--rounds 5] [--updates 16] [--sizes default small]
       [--k 1 4 16] [--profile]

For each size it compiles the update once per K in `--k` (K = `LearnerConfig.sgd_steps_per_call`:
K updates `lax.scan`ned in one jitted call over K device-resident batches), counts the FLOPs of one
update twice — XLA's own cost analysis of the compiled K = 1 update, and a hand count of the
dense-layer matmuls (forward, weight gradients, input gradients) — and then, round by round, times
the f32 matmul 5120×512 @ 512×512 in JAX and `--updates` updates for every K, all in the same round
so that they see the same machine load (other processes share these CPUs). It also times the whole
`Learner.step()` path (numpy batches from the host, stacking and one host→device transfer per call,
counter, metrics) for the smallest and largest K, once with a logger that writes every row (a metrics
fetch per call, what every step did before) and once with one that drops every row (no fetch): the
gap to the device-resident update is the host share. Each table gives medians over rounds of
per-round figures: updates/s, the ratio to K = 1 in the same round, and the fraction
(hand-counted matmul FLOPs / update time) / (matmul FLOP rate of the same round).
`--profile` also times the parts of one update separately.
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

from dmpo.agent.learning import (
    Learner,
    bootstrap,
    critic_loss,
    init_training_state,
    make_multi_update_fn,
    make_update_fn,
    policy_loss,
)
from dmpo.agent.learning.learner import stack_batches
from dmpo.agent.networks import make_networks
from dmpo.config import LearnerConfig, NetworkConfig
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
    layer_norm: str = "first"
    residual: bool = False
    normalize_observations: bool = False


SIZES = {
    "default": Size("default", 256, 20, (256, 256, 256), (512, 512, 256)),
    "small": Size("small", 64, 8, (64, 64), (128, 128)),
    # `--preset fast` before 2026-12-05 (batch 256, critic 256-256-256), as measured, and the cheaper-update
    # levers of docs/results/time-to-score.md; `fast-b128` is `--preset fast` since (half the batch).
    "fast": Size("fast", 256, 20, (256, 256, 256), (256, 256, 256)),
    "fast-b128": Size("fast-b128", 128, 20, (256, 256, 256), (256, 256, 256)),
    "fast-n10": Size("fast-n10", 256, 10, (256, 256, 256), (256, 256, 256)),
    "fast-critic2": Size("fast-critic2", 256, 20, (256, 256, 256), (256, 256)),
    # `--preset fast --agent.networks.layer-norm every`: a LayerNorm before every hidden activation.
    "fast-b128-ln": Size("fast-b128-ln", 128, 20, (256, 256, 256), (256, 256, 256), layer_norm="every"),
    # `--preset fast --agent.networks.residual`: the layers after the first in residual blocks.
    "fast-b128-residual": Size("fast-b128-residual", 128, 20, (256, 256, 256), (256, 256, 256),
                               residual=True),
    # `--preset fast --agent.networks.normalize-observations`: running observation statistics.
    "fast-b128-obsnorm": Size("fast-b128-obsnorm", 128, 20, (256, 256, 256), (256, 256, 256),
                              normalize_observations=True),
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
    networks = make_networks(spec, network_config(size))
    config = LearnerConfig(num_samples=size.num_samples)
    state = jax.jit(lambda key: init_training_state(networks, spec, config, key))(jax.random.PRNGKey(0))
    batch = jax.device_put(make_batch(size.batch))
    start = time.perf_counter()
    compiled = make_update_fn(networks, config).lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    return Setup(size, compiled, state, batch, compile_seconds, xla_flops(compiled), hand_count(size),
                 networks, config)


def network_config(size: Size) -> NetworkConfig:
    return NetworkConfig(policy_layer_sizes=size.policy, critic_layer_sizes=size.critic,
                         num_atoms=size.atoms, layer_norm=size.layer_norm,
                         residual=size.residual, normalize_observations=size.normalize_observations)


def time_updates(run: Setup, steps: int) -> float:
    state, metrics = run.update(run.state, run.batch)  # warm
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = run.update(state, run.batch)
    jax.block_until_ready((state, metrics))
    return (time.perf_counter() - start) / steps


class ScannedUpdate:
    """K updates per jitted call on K distinct device-resident batches (`make_multi_update_fn`)."""

    def __init__(self, run: Setup, k: int) -> None:
        self.k = k
        self.batches = jax.device_put(stack_batches([make_batch(run.size.batch, seed) for seed in range(k)]))
        self.update = (make_update_fn(run.networks, run.config) if k == 1
                       else make_multi_update_fn(run.networks, run.config))
        self.inputs = jax.tree_util.tree_map(lambda x: x[0], self.batches) if k == 1 else self.batches
        start = time.perf_counter()
        self.update = self.update.lower(run.state, self.inputs).compile()
        self.compile_seconds = time.perf_counter() - start
        self.state = run.state

    def seconds_per_update(self, updates: int) -> float:
        calls = max(1, updates // self.k)
        state, metrics = self.update(self.state, self.inputs)  # warm
        jax.block_until_ready(metrics)
        start = time.perf_counter()
        for _ in range(calls):
            state, metrics = self.update(state, self.inputs)
        jax.block_until_ready((state, metrics))
        return (time.perf_counter() - start) / (calls * self.k)


class EveryRow:
    def write(self, data: dict) -> None:
        pass


class NoRow(EveryRow):
    def will_write(self) -> bool:
        return False


class LearnerPath:
    """`Learner.step()` fed numpy batches from the host, with a logger that writes every row or none."""

    def __init__(self, run: Setup, k: int, fetch: bool) -> None:
        import itertools

        self.k, self.fetch = k, fetch
        host_batches = [make_batch(run.size.batch, seed) for seed in range(k)]
        config = dataclasses.replace(run.config, sgd_steps_per_call=k)
        self.learner = Learner(run.networks, env_spec(), config, itertools.cycle(host_batches),
                               logger=EveryRow() if fetch else NoRow())
        jax.block_until_ready(self.learner.step())  # compile

    def seconds_per_update(self, updates: int) -> float:
        calls = max(1, updates // self.k)
        start = time.perf_counter()
        for _ in range(calls):
            self.learner.step()
        jax.block_until_ready(self.learner.state)
        return (time.perf_counter() - start) / (calls * self.k)


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
    parser.add_argument("--updates", type=int, default=16, help="updates per timing (per K and path)")
    parser.add_argument("--sizes", nargs="+", default=["default", "small"], choices=sorted(SIZES))
    parser.add_argument("--k", nargs="+", type=int, default=[1, 4, 16], help="sgd_steps_per_call values")
    parser.add_argument("--no-learner-path", action="store_true", help="skip the Learner.step() timings")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    ks = sorted(set(args.k))

    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}), "
          f"{jax.local_device_count()} device(s); {os.cpu_count()} CPUs, load average before "
          f"{os.getloadavg()[0]:.1f}")
    tables = []
    for name in args.sizes:
        run = setup(SIZES[name])
        variants: dict[str, object] = {f"K={k}": ScannedUpdate(run, k) for k in ks}
        if not args.no_learner_path:
            for k in sorted({ks[0], ks[-1]}):
                variants[f"Learner.step K={k}, fetch every row"] = LearnerPath(run, k, fetch=True)
                variants[f"Learner.step K={k}, no fetch"] = LearnerPath(run, k, fetch=False)
        print(f"{name}: compile K=1 {run.compile_seconds:.1f} s; "
              + ", ".join(f"{label} {v.compile_seconds:.1f} s" for label, v in variants.items()
                          if isinstance(v, ScannedUpdate)))
        rates: list[float] = []
        times: dict[str, list[float]] = {label: [] for label in variants}
        for round_index in range(args.rounds):
            rates.append(matmul_rate())
            order = list(variants.items())
            if round_index % 2:  # alternate the order so no variant always runs right after the matmul
                order.reverse()
            for label, variant in order:
                times[label].append(variant.seconds_per_update(args.updates))
        base = times[f"K={ks[0]}"]
        rows = []
        for label, seconds in times.items():
            ratio = [b / t for b, t in zip(base, seconds, strict=True)]
            fraction = [run.hand / t / 1e9 / r for t, r in zip(seconds, rates, strict=True)]
            rows.append((label, statistics.median(seconds), statistics.median(ratio), min(ratio), max(ratio),
                         statistics.median(fraction)))
            print(f"  {label:<36} ms/update per round {[round(1e3 * t, 2) for t in seconds]}")
        print(f"  matmul GFLOP/s per round {[round(r) for r in rates]}")
        tables.append((run, statistics.median(rates), rows))
        if args.profile:
            for part, ms in profile(run, args.updates).items():
                print(f"  {part:<48} {ms:8.2f} ms")

    print(f"\nload average after {os.getloadavg()[0]:.1f}")
    for run, rate, rows in tables:
        size = run.size
        xla = "n/a" if run.xla is None else f"{run.xla / 1e9:.3f}"
        print(f"\n{size.name}: B {size.batch}, N {size.num_samples}, "
              f"policy {'-'.join(map(str, size.policy))}, critic {'-'.join(map(str, size.critic))}; "
              f"GFLOP/update {xla} (XLA) / {run.hand / 1e9:.3f} "
              f"(matmuls, hand); matmul {rate:.1f} GFLOP/s (median of rounds)")
        print(f"| variant | updates/s | ms/update | vs K={ks[0]}, same round (min–max) "
              "| fraction of matmul rate |")
        print("|---|---:|---:|---|---:|")
        for label, seconds, ratio, low, high, fraction in rows:
            print(f"| {label} | {1 / seconds:.1f} | {1e3 * seconds:.2f} "
                  f"| {ratio:.2f}× ({low:.2f}–{high:.2f}) | {fraction:.0%} |")


if __name__ == "__main__":
    main()
