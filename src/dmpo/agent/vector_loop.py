"""The old home of the lockstep loop, kept so that `dmpo.run.local` imports it from here until it
imports `dmpo.agent.environment_loop.EnvironmentLoop`, which is that loop (N ≥ 1 environments)."""

from dmpo.agent.environment_loop import EnvironmentLoop as VectorEnvironmentLoop

__all__ = ["VectorEnvironmentLoop"]
