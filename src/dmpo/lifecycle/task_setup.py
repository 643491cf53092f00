"""What both trainers do with the task before anything else is built.

`prepare_task(config, env_factory)`:

1. the environment factory: the config's task (`TaskFactory`), or the user's Python callable wrapped
   in the pipeline (`PipelineFactory`), whose name (`module:qualname`, or `python:<name>` when it
   cannot be imported by name) replaces `TrainConfig.env`, so config.json says what was trained;
2. for the distributed trainer, that the factory can be pickled for the Ray nodes;
3. one environment built: every space and the first observation checked (`dmpo.envs.checks`), and the
   observation torso checked against the observations (images need a pixel torso);
4. an 'auto' or 'auto-gym' critic support resolved (`dmpo.agent.learning.critic_support`).

All of it happens before a run directory exists or Ray starts, so a bad task costs nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dmpo.agent.learning.critic_support import report, resolve_support
from dmpo.config import ConfigError, TrainConfig
from dmpo.envs import EnvError, TaskFactory
from dmpo.envs.checks import build_environment, check_agent_can_feed
from dmpo.envs.registry import PipelineFactory


def saved_config(run_dir: Any) -> TrainConfig | None:
    """The config recorded in a run directory, or None if there is none to read (the caller's own
    checks name a missing or broken run)."""
    from dmpo.lifecycle.directory import RunDirectory

    try:
        return RunDirectory.open(run_dir).load_config(TrainConfig)
    except (OSError, ValueError):
        return None


def make_factory(config: TrainConfig, env_factory: Any = None) -> tuple[TrainConfig, Any]:
    """`(config, factory)`: step 1 of the module docstring."""
    if env_factory is None:
        return config, TaskFactory(config.env, pixels=config.pixels, action_repeat=config.action_repeat)
    if isinstance(env_factory, TaskFactory):
        return config, env_factory
    factory = env_factory if isinstance(env_factory, PipelineFactory) else PipelineFactory(
        env_factory, config.action_repeat)
    return dataclasses.replace(config, env=factory.name), factory


def check_picklable(factory: Any) -> None:
    """ConfigError naming the factory if cloudpickle (what Ray uses) cannot serialise it."""
    from ray import cloudpickle

    try:
        cloudpickle.dumps(factory)
    except Exception as error:  # noqa: BLE001 - any pickling failure means the same thing here
        name = getattr(factory, "name", None) or repr(factory)
        raise ConfigError(f"env_factory {name} cannot be pickled for the Ray nodes of --actors "
                          f"({type(error).__name__}: {error}); pass a module-level function or an "
                          "entry point 'module.path:callable' instead") from None


def prepare_task(config: TrainConfig, env_factory: Any = None, *, distributed: bool = False,
                 saved: TrainConfig | None = None, quiet: bool = False) -> tuple[TrainConfig, Any]:
    """`(config, factory)` ready to train (module docstring). `saved`: the run's recorded config on
    resume, whose resolved support replaces an 'auto' one in `config`."""
    config, factory = make_factory(config, env_factory)
    if distributed:
        check_picklable(factory)
    if saved is not None and not config.agent.networks.support_resolved:
        networks = dataclasses.replace(config.agent.networks, vmin=saved.agent.networks.vmin,
                                       vmax=saved.agent.networks.vmax)
        config = dataclasses.replace(config, agent=dataclasses.replace(config.agent, networks=networks))
    probe = build_environment(factory, config.seed, config.env)
    try:
        check_agent_can_feed(probe.observation_spec(), config.agent.networks.observation_network)
        probe.reset()  # the first observation is checked against the spec
        config, line = resolve_support(config, factory, probe)
    except EnvError as error:
        message = str(error)
        raise EnvError(message if message.startswith(config.env) else f"{config.env}: {message}") from None
    finally:
        close = getattr(probe, "close", None)
        if close is not None:
            close()
    report(line, quiet)
    return config, factory
