"""Runners: the actor–environment loop and policy evaluation."""

from dmpo.runners.environment_loop import Actor, EnvironmentLoop, Observer, default_render, evaluate

__all__ = ["Actor", "EnvironmentLoop", "Observer", "default_render", "evaluate"]
