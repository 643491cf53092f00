"""The one place that builds a DMPO agent's parts, for the single-process agent and every Ray node.

    builder = DMPOBuilder(config, environment_spec)
    table = builder.make_table(builder.make_rate_limiter("local"), seed=table_seed)
    adders = builder.make_adders(table, num_envs)          # or into a BatchedWriter to a remote table
    learner = builder.make_learner(builder.make_dataset(table, prefetch=False), seed=learner_seed)
    actor = builder.make_actor(learner.online_policy_params, seed=actor_seed, adders=adders)

`DMPO` (agent.py) wires these in one process; the replay node takes its table, the actor node its
adder and actor, the evaluator its evaluation actor and the learner node its learner from the same
builder, so both modes store the same items in the same kind of table under the same limiter.

Rate limiters (algorithm.md §2): `"local"` is the synchronous agent's `MinSize(1)` (its `update()` schedule
holds the ratio); `"ratio"` is the distributed agent's guarded `SampleToInsertRatio` on
`min_replay_size`, also used by the overlapped single-process learner (`MinSize(min_replay_size)`
when `samples_per_insert` is None).

JAX is imported only by the methods that need it (networks, learner, actors): the replay node
builds its table from a builder without loading JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from dmpo.config import DMPOConfig
from dmpo.replay import (
    FrameStackTable,
    MinSize,
    NStepTransitionAdder,
    PrefetchingIterator,
    SampleToInsertRatio,
    Table,
    transition_signature,
)
from dmpo.types import EnvironmentSpec

NetworkFactory = Callable[[EnvironmentSpec], Any]
"""`network_factory(env_spec) -> DMPONetworks`; every part built from one builder shares its result."""

RateLimiterMode = Literal["local", "ratio"]


def pixel_stack_size(environment_spec: EnvironmentSpec) -> int | None:
    """Frames per observation if the observation is an RGB frame stack (uint8 [H, W, 3·S]), else None."""
    spec = environment_spec.observations
    if isinstance(spec, dict) or np.dtype(spec.dtype) != np.uint8 or len(spec.shape) != 3:
        return None
    return spec.shape[-1] // 3 if spec.shape[-1] % 3 == 0 else None


class OnDemandSampler:
    """An iterator that samples a batch only when the learner asks (keeps synchronous runs reproducible)."""

    def __init__(self, table: Table, batch_size: int) -> None:
        self._table = table
        self._batch_size = batch_size

    def __iter__(self) -> OnDemandSampler:
        return self

    def __next__(self) -> Any:
        return self._table.sample(self._batch_size)

    def close(self) -> None:
        pass


class DMPOBuilder:
    """Makes every part of a DMPO agent from one config and environment spec (module docstring).

    Picklable (config, spec and network factory only) so the driver can hand it to Ray nodes.
    """

    def __init__(self, config: DMPOConfig, environment_spec: EnvironmentSpec, *, networks: Any = None,
                 network_factory: NetworkFactory | None = None) -> None:
        if not isinstance(config, DMPOConfig):
            raise TypeError(f"config must be a DMPOConfig, got {type(config).__name__}")
        if network_factory is not None and not callable(network_factory):
            raise TypeError(f"network_factory must be callable(env_spec) -> DMPONetworks, "
                            f"got {network_factory!r}")
        self.config = config
        self.environment_spec = environment_spec
        self.network_factory = network_factory
        self._networks = networks

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_networks": None}  # networks are rebuilt where they are used

    @property
    def networks(self) -> Any:
        if self._networks is None:
            if self.network_factory is not None:
                self._networks = self.network_factory(self.environment_spec)
            else:
                from dmpo.agent.networks import make_networks

                self._networks = make_networks(self.environment_spec, self.config.networks)
        return self._networks

    @property
    def signature(self) -> Any:
        return transition_signature(self.environment_spec)

    # -- replay ---------------------------------------------------------------------------------
    def make_rate_limiter(self, mode: RateLimiterMode) -> Any:
        """`"local"`: MinSize(1); `"ratio"`: the guarded sample/insert ratio (module docstring)."""
        config = self.config
        if mode == "local":
            return MinSize(1)
        if mode != "ratio":
            raise ValueError(f"rate limiter mode must be 'local' or 'ratio', got {mode!r}")
        if config.samples_per_insert is None:
            return MinSize(config.min_replay_size)
        # error buffer max(0.1·spi·min_replay_size, 2·spi, 1): algorithm.md §2 with the guard of §8.2 item 25.
        spi = float(config.samples_per_insert)
        return SampleToInsertRatio.from_agent_defaults(spi, config.min_replay_size)

    def make_table(self, rate_limiter: Any, *, seed: int | None) -> Table:
        """The replay table: frame-deduplicating for stacked pixel observations, plain otherwise."""
        frames = pixel_stack_size(self.environment_spec)
        size = self.config.max_replay_size
        if frames is None:
            return Table(self.signature, size, rate_limiter, seed=seed)
        return FrameStackTable(self.signature, size, rate_limiter, num_stacked=frames, seed=seed)

    def make_adder(self, writer: Any) -> NStepTransitionAdder:
        """The n-step transition adder writing into `writer` (a table or a batched remote writer)."""
        return NStepTransitionAdder(writer, self.config.n_step, self.config.learner.discount)

    def make_dataset(self, table_like: Any, *, prefetch: bool, num_workers: int = 1,
                     poll_interval: float = 0.1) -> Any:
        """The learner's batches: prefetched on threads (keeping partial samples), or sampled on demand."""
        if not prefetch:
            return OnDemandSampler(table_like, self.config.batch_size)
        return PrefetchingIterator(table_like, self.config.batch_size, self.config.prefetch_size,
                                   num_workers=num_workers, poll_interval=poll_interval)

    # -- learning and acting ----------------------------------------------------------------------
    def make_learner(self, batches: Any, *, seed: int, logger: Any = None, counter: Any = None) -> Any:
        from dmpo.agent.learning import Learner

        return Learner(self.networks, self.environment_spec, self.config.learner, batches, seed=seed,
                       logger=logger, counter=counter)

    def make_adders(self, writer: Any, num_envs: int) -> list[NStepTransitionAdder]:
        """One n-step adder per environment, all writing into `writer` (each keeps its own episode)."""
        return [self.make_adder(writer) for _ in range(num_envs)]

    def make_actor(self, params_source: Callable[[], Any], *, seed: int, adders: Any,
                   update_period: int = 1) -> Any:
        """The behaviour policy (a Gaussian sample per step and environment, `acting.BatchedActor`)
        feeding `adders`, one per lockstep environment (`make_adders`)."""
        from dmpo.agent.acting import BatchedActor

        return BatchedActor(self.networks, params_source, seed=seed, adders=adders,
                            update_period=update_period)

    def make_evaluation_actor(self, params_source: Callable[[], Any], *, update_period: int = 1) -> Any:
        """The evaluation policy (the policy's mean, `acting.EvaluationActor`), writing nothing."""
        from dmpo.agent.acting import EvaluationActor

        return EvaluationActor(self.networks, params_source, update_period=update_period)

    def make_evaluation_policy(self) -> Callable[[Any, Any], Any]:
        """Jitted `mean_fn(params, observation)` for stand-alone evaluation (`environment_loop.evaluate`)."""
        from dmpo.agent.acting import make_mean_fn

        return make_mean_fn(self.networks)


def environment_factory(config: Any) -> Any:
    """The picklable `EnvironmentFactory` (seed -> environment) of a `TrainConfig`'s task."""
    from dmpo.envs import TaskFactory

    return TaskFactory(config.env, pixels=config.pixels, action_repeat=config.action_repeat)


__all__ = ["DMPOBuilder", "NetworkFactory", "OnDemandSampler", "environment_factory",
           "pixel_stack_size"]
