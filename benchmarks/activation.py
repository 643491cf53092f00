"""Cost of the ELU activation in the target critic's forward pass (the largest part of an update).

Times the default critic torso (`LayerNormMLP` 512-512-256, walker-sized 30-dim input) on the N·B =
5,120 rows of one update's bootstrap, with three activations, round-robin so that all see the same load:

* `flax.linen.elu`, which the networks use (written with `expm1`),
* a candidate written with `exp(x) - 1` (in case XLA:CPU vectorises `exp` better than `expm1`),
* the identity (the floor: matmuls, layer norm and tanh only).

Measured 0.96-1.02x flax's elu for the candidate, so the networks keep flax's (docs/results/training-loop.md).

    .venv/bin/python benchmarks/activation.py [--rounds 5] [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dmpo.agent.networks import LayerNormMLP

ROWS, INPUT_DIM = 5120, 30


def exp_minus_one_elu(x: jax.Array) -> jax.Array:
    return jnp.where(x > 0, x, jnp.exp(jnp.where(x > 0, 0.0, x)) - 1.0)


def make_forward(activation):
    module = LayerNormMLP((512, 512, 256), activation=activation, activate_final=True)
    inputs = jax.numpy.asarray(np.random.default_rng(0).standard_normal((ROWS, INPUT_DIM), np.float32))
    params = module.init(jax.random.PRNGKey(0), inputs)
    forward = jax.jit(module.apply)
    forward(params, inputs).block_until_ready()
    return lambda: forward(params, inputs).block_until_ready()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    variants = {"flax.linen.elu (expm1)": nn.elu, "candidate (exp - 1)": exp_minus_one_elu,
                "identity (floor)": lambda x: x}
    forwards = {name: make_forward(activation) for name, activation in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, forward in forwards.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                forward()
            times[name].append((time.perf_counter() - start) / args.calls * 1e3)
    base = statistics.median(times["flax.linen.elu (expm1)"])
    print(f"jax {jax.__version__}, {ROWS} rows, torso 512-512-256, median of {args.rounds} rounds\n")
    print("| activation | ms per forward (median) | × flax.linen.elu, same run |")
    print("|---|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.1f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
