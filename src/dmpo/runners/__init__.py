"""Runners: the actor–environment loop and policy evaluation."""

from dmpo.runners.environment_loop import Agent, EnvironmentLoop, Observer, default_render, evaluate

__all__ = ["Agent", "EnvironmentLoop", "Observer", "default_render", "evaluate"]
