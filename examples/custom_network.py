"""Train with networks of your own: a Flax encoder shared by policy and critic, and a wider policy torso.

    python examples/custom_network.py                     # 20,000 env steps on Pendulum-v1
    python examples/custom_network.py --steps 2000 --run-dir "$OUT/custom-network"

`dmpo.train(config, networks=...)` takes a `dmpo.agent.networks.DMPONetworks`: an observation network
(`observation -> embedding`), a policy (`embedding -> (mean, stddev)`) and a critic (`(embedding, action)
-> logits over the support's atoms`). The simplest start is `dmpo.make_networks` for the task, with the
parts you want to change replaced. The learner trains the observation network through the critic's loss
only, as in the reference agent. One process only: a distributed run builds its networks in each node
(`dmpo.distributed.run_distributed(network_factory=...)`).
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax

import dmpo
from dmpo.agent.networks import MLP


class Encoder(nn.Module):
    """The observation network: flatten, then Dense(64) and a tanh, so the embedding is bounded."""

    features: int = 64

    @nn.compact
    def __call__(self, observation: jax.Array) -> jax.Array:
        x = observation.reshape((observation.shape[0], -1))
        return nn.tanh(nn.Dense(self.features)(x))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps to train (default: %(default)s)")
    parser.add_argument("--run-dir", default="runs/custom-network",
                        help="a new run folder (default: %(default)s)")
    args = parser.parse_args(argv)

    # Pendulum's returns per 200-step episode lie in [-1627.4, 0]: a support given as numbers, since
    # networks built here cannot wait for `auto`'s probe of the task.
    network_config = dmpo.NetworkConfig(policy_layer_sizes=(64, 64), critic_layer_sizes=(64, 64),
                                        vmin=-1650.0, vmax=0.0)
    agent = dmpo.DMPOConfig(batch_size=64, min_replay_size=min(1000, args.steps // 2),
                            samples_per_insert=32.0, networks=network_config)
    config = dmpo.TrainConfig(env="gym:Pendulum-v1", steps=args.steps, eval_every=args.steps, eval_episodes=2,
                              agent=agent)

    spec = dmpo.make_environment_spec(dmpo.make(config.env, seed=0))
    base = dmpo.make_networks(spec, network_config)
    networks = base._replace(
        observation=Encoder(),
        policy=base.policy.clone(torso=MLP((128, 128), activation=nn.relu, activate_final=True)),
    )
    summary = dmpo.train(config, args.run_dir, networks=networks, progress=False)
    print(f"{summary['run_dir']}: evaluation return {summary['last_eval']['return_mean']:.1f} "
          f"after {summary['env_steps']} env steps")
    return summary


if __name__ == "__main__":
    main()
