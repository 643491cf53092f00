"""`--agent.networks.vmin auto` / `vmax auto`: a categorical critic support that fits the task.

"auto-gym" (what `--preset fast`, `dmpo train`'s default, uses) is "auto" on `gym:` tasks and the
reference's -150 / 150 on every other task: dm_control tasks, whose returns [0, 100] that support holds
and where the preset's results were measured, and the user's own environments, where "auto" in observed
mode would build and step one more environment before training, which the user must ask for.

The critic predicts the discounted return `Z = Σ_t γ^t r_t` of agent steps (γ the learner's discount;
the environment's discount 0 at a termination only cuts the sum short). If every per-step reward lies
in `[lo, hi]`, then `Z` lies in `[min(lo, lo/(1−γ)), max(hi, hi/(1−γ))]` (the `min`/`max` keep the
one-step episode `Z = r_0` inside). The n-step target `Σ_{k<n} γ^k r_k + γ^n z'` maps that interval
onto itself exactly (`lo·(1−γ^n)/(1−γ) + γ^n·lo/(1−γ) = lo/(1−γ)`), so n does not change the support.

Two sources of `[lo, hi]`, in this order:

1. **Declared** by the task: a dm_env `BoundedArray` reward spec with finite bounds (after the action
   repeat, see `ActionRepeatWrapper.reward_spec`), or a `dmc:` task, whose rewards the suite keeps in
   [0, 1] per control step (so [0, R] per agent step with action repeat R, and [0, R/(1−γ)] for Z:
   [0, 100] at γ = 0.99, R = 1), or a gymnasium task whose reward function is bounded by its own
   definition (`GYM_REWARD_BOUNDS`: Pendulum's reward is a cost ≤ 0, so no atom lies above a return
   of 0). Used exactly, no margin.
2. **Observed**: otherwise (gymnasium declares no reward range since 1.0) a uniformly random policy
   takes `min_replay_size` agent steps in an environment of its own (seeded by
   `dmpo.utils.seeds.reward_probe_seed`) before training, and `[lo, hi]` are the smallest and largest
   rewards it saw. A random policy's rewards understate what a trained one earns, so the support is
   widened by `MARGIN_BELOW` of the interval's span below and `MARGIN_ABOVE` above (the interval's
   span counts as at least 1).

This probe is not the replay fill itself: both trainers build the networks, whose support is fixed,
before the first environment step, and doing it before either starts keeps the two modes identical.
The resolved numbers replace "auto" in the run's config.json, so a resume uses the same support.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
from dm_env import specs

from dmpo.config import REFERENCE_SUPPORT, ConfigError, NetworkConfig, TrainConfig
from dmpo.utils.seeds import reward_probe_seed

MARGIN_BELOW = 0.25
"""Observed mode: the support extends below the random policy's value range by this share of its span."""
MARGIN_ABOVE = 1.0
"""Observed mode: ... and above it by this share (learning raises returns, so more room above)."""

GYM_REWARD_BOUNDS: dict[str, tuple[float, float]] = {
    # -(θ² + 0.1·θ̇² + 0.001·u²) with θ ∈ [-π, π], |θ̇| ≤ 8, |u| ≤ 2 (gymnasium's pendulum.py).
    "Pendulum-v1": (-(np.pi**2 + 0.1 * 8.0**2 + 0.001 * 2.0**2), 0.0),
    # -0.1·u² with |u| ≤ 1, plus 100 at the step that reaches the goal.
    "MountainCarContinuous-v0": (-0.1, 100.0),
    # 1 while the pole is up (v4), the same as an int of "not terminated" (v5).
    "InvertedPendulum-v4": (0.0, 1.0),
    "InvertedPendulum-v5": (0.0, 1.0),
}
"""Per-control-step reward bounds of gymnasium tasks whose reward is bounded by its definition
(gymnasium 1.x declares no reward range). Tasks whose rewards grow with speed (HalfCheetah, Hopper,
Walker2d...) have no such bound and use the observed rule."""


def value_bounds(low: float, high: float, discount: float) -> tuple[float, float]:
    """The interval of discounted returns for per-step rewards in `[low, high]` (module docstring)."""
    if not 0.0 <= discount < 1.0:
        raise ConfigError(f"LearnerConfig.discount must be < 1 for an 'auto' critic support (returns are "
                          f"unbounded at discount 1), got {discount}")
    scale = 1.0 / (1.0 - discount)
    return min(low, low * scale), max(high, high * scale)


def declared_reward_bounds(environment: Any, config: TrainConfig) -> tuple[float, float] | None:
    """Per-agent-step reward bounds the task declares (module docstring), or None."""
    spec = environment.reward_spec()
    if isinstance(spec, specs.BoundedArray):
        low, high = float(np.min(spec.minimum)), float(np.max(spec.maximum))
        if np.isfinite(low) and np.isfinite(high) and low <= high:
            return low, high
    repeat = config.action_repeat or (2 if config.pixels else 1)
    if config.env.startswith("dmc:"):
        return 0.0, float(repeat)
    gym_bounds = GYM_REWARD_BOUNDS.get(config.env.removeprefix("gym:"))
    if config.env.startswith("gym:") and gym_bounds is not None:  # a sum of `repeat` control steps
        return repeat * gym_bounds[0], repeat * gym_bounds[1]
    return None


def observed_reward_bounds(factory: Any, steps: int, seed: int) -> tuple[float, float]:
    """Smallest and largest reward of `steps` uniformly random agent steps in `factory(seed)`."""
    environment = factory(seed)
    try:
        spec = environment.action_spec()
        rng = np.random.default_rng(seed)
        low, high = np.inf, -np.inf
        environment.reset()
        for _ in range(steps):
            timestep = environment.step(rng.uniform(-1.0, 1.0, spec.shape).astype(spec.dtype))
            if timestep.reward is not None:
                reward = float(np.sum(timestep.reward))
                low, high = min(low, reward), max(high, reward)
            if timestep.last():
                environment.reset()
    finally:
        environment.close()
    return float(low), float(high)


def widen(low: float, high: float) -> tuple[float, float]:
    span = max(high - low, 1.0)
    return low - MARGIN_BELOW * span, high + MARGIN_ABOVE * span


def settle_auto_gym(networks: NetworkConfig, env: str | None) -> NetworkConfig:
    """`networks` with each "auto-gym" bound made "auto" if `env` is a `gym:` task and the reference's
    value otherwise (also when the task is not known: `env` None, as for `dmpo.DMPO`, which sees only
    the environment's spec)."""
    gym = env is not None and env.startswith("gym:")

    def settle(value: Any, reference: float) -> Any:
        return value if value != "auto-gym" else ("auto" if gym else reference)

    return dataclasses.replace(networks, vmin=settle(networks.vmin, REFERENCE_SUPPORT[0]),
                               vmax=settle(networks.vmax, REFERENCE_SUPPORT[1]))


def resolve_support(config: TrainConfig, factory: Any, environment: Any) -> tuple[TrainConfig, str | None]:
    """`config` with 'auto' and 'auto-gym' vmin/vmax replaced by numbers, and a line saying how (None if
    no 'auto' was left once 'auto-gym' was settled).

    `environment` is an already-built instance of the task (for its reward spec); `factory` builds the
    probe's environment in observed mode.
    """
    networks = settle_auto_gym(config.agent.networks, config.env)
    if networks != config.agent.networks:
        config = dataclasses.replace(config, agent=dataclasses.replace(config.agent, networks=networks))
    if "auto" not in (networks.vmin, networks.vmax):
        return config, None
    discount = config.agent.learner.discount
    declared = declared_reward_bounds(environment, config)
    if declared is not None:
        low, high = value_bounds(*declared, discount)
        how = (f"declared per-step rewards in [{declared[0]:g}, {declared[1]:g}], discount {discount:g}: "
               f"returns lie in [{low:g}, {high:g}]")
    else:
        steps = config.agent.min_replay_size
        seen = observed_reward_bounds(factory, steps, reward_probe_seed(config.seed))
        low, high = widen(*value_bounds(*seen, discount))
        how = (f"{steps} random steps saw rewards in [{seen[0]:.4g}, {seen[1]:.4g}]; at discount "
               f"{discount:g} widened by {MARGIN_BELOW:g}/{MARGIN_ABOVE:g} of the span below/above")
    vmin = low if networks.vmin == "auto" else networks.vmin
    vmax = high if networks.vmax == "auto" else networks.vmax
    if not vmin < vmax:
        raise ConfigError(f"NetworkConfig.vmin/vmax: 'auto' resolved to vmin {vmin:g} >= vmax {vmax:g}; set "
                          "both --agent.networks.vmin and --agent.networks.vmax, or both to auto")
    resolved = dataclasses.replace(networks, vmin=float(vmin), vmax=float(vmax))
    config = dataclasses.replace(config, agent=dataclasses.replace(config.agent, networks=resolved))
    return config, f"critic support auto: [{vmin:.6g}, {vmax:.6g}] ({how})"


def report(line: str | None, quiet: bool = False) -> None:
    if line is not None and not quiet:
        print(f"dmpo: {line}", file=sys.stderr)
