"""Typed, frozen configuration. Defaults equal the reference's (algorithm.md §3, §4.2, §6.4, §10).

Every dataclass validates itself on construction and raises `ConfigError` naming the bad
field and the expected value, so that a wrong setting fails before any work starts.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import typing
from collections.abc import Callable, Iterator
from typing import Literal


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field (`field`: `Class.name`)."""

    def __init__(self, message: str, *, field: str | None = None, expected: str | None = None,
                 value: object = None) -> None:
        super().__init__(message)
        self.field, self.expected, self.value = field, expected, value


class ParsedConfigError(Exception):
    """A `ConfigError` raised while `parsing_flags()` is on. Not a ValueError, so that a command-line
    parser (tyro wraps ValueErrors in its usage panel) lets it through to `dmpo.cli.main`, which names the
    flag; `.error` is the ConfigError."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(str(error))
        self.error = error


_parsing_flags = contextvars.ContextVar("dmpo_parsing_flags", default=False)


@contextlib.contextmanager
def parsing_flags() -> Iterator[None]:
    """Within it, configs raise `ParsedConfigError` instead of `ConfigError` (see there) until
    `flags_parsed()` says the parser is done (the command it calls then runs with `ConfigError`s)."""
    token = _parsing_flags.set(True)
    try:
        yield
    finally:
        _parsing_flags.reset(token)


def flags_parsed() -> None:
    """Configs raise `ConfigError` again (see `parsing_flags`)."""
    _parsing_flags.set(False)


def _check(condition: bool, field: str, expected: str, value: object) -> None:
    if not condition:
        error = ConfigError(f"{field} must be {expected}, got {value!r}", field=field, expected=expected,
                            value=value)
        if _parsing_flags.get():
            raise ParsedConfigError(error)
        raise error


def _positive_int(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        _check(isinstance(value, int) and value > 0, f"{type(obj).__name__}.{name}",
               "a positive integer", value)


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        _check(isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
               f"{type(obj).__name__}.{name}", "a positive finite number", value)


@dataclasses.dataclass(frozen=True)
class MPOLossConfig:
    """MPO policy loss with decoupled KL constraints (algorithm.md §6.4)."""

    epsilon: float = 0.1
    """KL bound of the non-parametric E-step distribution (temperature dual)."""
    epsilon_penalty: float = 1e-3
    """KL bound of the action-penalty distribution (MO-MPO)."""
    epsilon_mean: float = 2.5e-3
    """KL bound on the change of the policy mean per update."""
    epsilon_stddev: float = 1e-6
    """KL bound on the change of the policy standard deviation per update."""
    init_log_temperature: float = 10.0
    """Initial raw temperature dual (softplus-parametrised)."""
    init_log_alpha_mean: float = 10.0
    """Initial raw mean-KL dual (softplus-parametrised)."""
    init_log_alpha_stddev: float = 1000.0
    """Initial raw stddev-KL dual (softplus-parametrised)."""
    per_dim_constraining: bool = True
    """One KL constraint per action dimension instead of one joint constraint."""
    action_penalization: bool = True
    """Penalise sampled actions outside [-1, 1] (MO-MPO penalty objective)."""
    min_temperature: float = 0.0
    """Floor on the temperature the E-step weights use (the temperature dual itself is not bounded):
    where the sampled actions' values differ little, the dual drives η low and the weights chase the
    critic's noise. 0 (no floor) is the reference."""

    def __post_init__(self) -> None:
        _positive(self, "epsilon", "epsilon_penalty", "epsilon_mean", "epsilon_stddev")
        _check(isinstance(self.min_temperature, (int, float)) and math.isfinite(self.min_temperature)
               and self.min_temperature >= 0, "MPOLossConfig.min_temperature", "a finite number >= 0",
               self.min_temperature)


AUTO_SUPPORT = ("auto", "auto-gym")
"""The `NetworkConfig.vmin`/`vmax` values resolved from the task before the networks are built
(`dmpo.agent.learning.critic_support`); a run's config.json holds the numbers they resolved to."""
REFERENCE_SUPPORT = (-150.0, 150.0)
"""The reference's critic support (algorithm.md §4.2): what "auto-gym" is on tasks other than `gym:`."""


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Network sizes; defaults are the control-suite networks of algorithm.md §4.2."""

    policy_layer_sizes: tuple[int, ...] = (256, 256, 256)
    """Hidden sizes of the policy's layer-norm MLP (activated after the last layer)."""
    critic_layer_sizes: tuple[int, ...] = (512, 512, 256)
    """Hidden sizes of the critic's layer-norm MLP (activated after the last layer)."""
    vmin: float | Literal["auto", "auto-gym"] = REFERENCE_SUPPORT[0]
    """Lowest atom of the categorical critic's support; "auto": from the task
    (`dmpo.agent.learning.critic_support`); "auto-gym": "auto" on `gym:` tasks, -150 on every other task."""
    vmax: float | Literal["auto", "auto-gym"] = REFERENCE_SUPPORT[1]
    """Highest atom of the categorical critic's support; "auto": from the task
    (`dmpo.agent.learning.critic_support`); "auto-gym": "auto" on `gym:` tasks, 150 on every other task."""
    num_atoms: int = 51
    """Number of atoms of the categorical critic's support."""
    init_scale: float = 0.7
    """Initial policy standard deviation."""
    min_scale: float = 1e-6
    """Floor on the policy standard deviation."""
    tanh_mean: bool = False
    """Squash the policy mean with tanh."""
    fixed_scale: bool = False
    """Keep the policy standard deviation fixed at init_scale."""
    observation_network: Literal["flatten", "impala", "drq"] = "flatten"
    """Observation torso shared by policy and critic: flatten (states) or a pixel torso."""
    layer_norm: Literal["first", "every"] = "first"
    """Where the policy's and critic's MLPs normalise: after the first layer only (the reference), or
    before every hidden activation (as SimBa and BRO do for SAC)."""
    residual: bool = False
    """Pair the policy's and critic's layers after the first into residual blocks (each adds
    LayerNorm(Dense(act(LayerNorm(Dense(x))))) to its input, as BRO does for SAC): an odd number of
    equal layer sizes, the same FLOPs as without; state networks only. False is the reference."""
    normalize_observations: bool = False
    """Normalise the flattened state observation by the running mean and variance of the observations
    the learner samples (as SimBa does for SAC); state networks (`observation_network="flatten"`) only.
    False is the reference."""

    def __post_init__(self) -> None:
        for name in ("policy_layer_sizes", "critic_layer_sizes"):
            sizes = getattr(self, name)
            _check(len(sizes) > 0 and all(isinstance(s, int) and s > 0 for s in sizes),
                   f"NetworkConfig.{name}", "a non-empty tuple of positive integers", sizes)
        for name in ("vmin", "vmax"):
            value = getattr(self, name)
            _check(value in AUTO_SUPPORT or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                             and math.isfinite(value)),
                   f"NetworkConfig.{name}", "a finite number, 'auto' or 'auto-gym'", value)
        _check(not self.support_resolved or self.vmin < self.vmax,
               "NetworkConfig.vmin", f"< vmax ({self.vmax})", self.vmin)
        _check(self.layer_norm in ("first", "every"), "NetworkConfig.layer_norm", "'first' or 'every'",
               self.layer_norm)
        _check(isinstance(self.residual, bool), "NetworkConfig.residual", "True or False", self.residual)
        if self.residual:
            for name in ("policy_layer_sizes", "critic_layer_sizes"):
                sizes = getattr(self, name)
                _check(len(sizes) >= 3 and len(sizes) % 2 == 1 and len(set(sizes)) == 1,
                       f"NetworkConfig.{name}", "an odd number (at least 3) of equal sizes with residual "
                       "blocks (the first layer, then blocks of two)", sizes)
            _check(self.layer_norm == "first", "NetworkConfig.layer_norm",
                   "'first' with residual blocks (they normalise each of their layers)", self.layer_norm)
            _check(self.observation_network == "flatten", "NetworkConfig.residual",
                   f"False with a pixel observation network ({self.observation_network!r})", self.residual)
        _check(isinstance(self.normalize_observations, bool), "NetworkConfig.normalize_observations",
               "True or False", self.normalize_observations)
        _check(not self.normalize_observations or self.observation_network == "flatten",
               "NetworkConfig.normalize_observations", "False with a pixel observation network "
               f"({self.observation_network!r}; only 'flatten' normalises)", self.normalize_observations)
        _check(isinstance(self.num_atoms, int) and self.num_atoms >= 2, "NetworkConfig.num_atoms",
               "an integer >= 2", self.num_atoms)
        _positive(self, "init_scale")
        _check(self.min_scale >= 0, "NetworkConfig.min_scale", ">= 0", self.min_scale)

    @property
    def support_resolved(self) -> bool:
        """Both support bounds are numbers: neither is one of `AUTO_SUPPORT`, left to the task."""
        return self.vmin not in AUTO_SUPPORT and self.vmax not in AUTO_SUPPORT


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Learner hyper-parameters (algorithm.md §5, §6)."""

    discount: float = 0.99
    """Agent discount γ applied on top of the environment discount."""
    num_samples: int = 20
    """Actions sampled from the target policy per next state (N)."""
    target_policy_update_period: int = 100
    """Learner steps between hard copies of the policy into its target."""
    target_critic_update_period: int = 100
    """Learner steps between hard copies of critic and observation network into their targets."""
    target_update_rate: float | None = None
    """If set, Polyak-average targets with this rate every step instead of periodic copies."""
    policy_learning_rate: float = 1e-4
    """Adam learning rate of the policy network."""
    critic_learning_rate: float = 1e-4
    """Adam learning rate of the critic and of the observation network (which only the critic's loss
    trains)."""
    dual_learning_rate: float = 1e-2
    """Adam learning rate of the dual variables (temperature, KL multipliers)."""
    clipping: bool = True
    """Clip policy and critic gradients (separately) to a global norm."""
    max_gradient_norm: float = 40.0
    """Global-norm bound used when clipping is on."""
    augmentation: Literal["none", "batch_shift", "image_shift"] = "none"
    """Pixel augmentation: none, one random shift per batch (reference) or per image (DrQ)."""
    mpo: MPOLossConfig = dataclasses.field(default_factory=MPOLossConfig)
    sgd_steps_per_call: int = 1
    """Updates per jitted learner call (Acme's `num_sgd_steps_per_step`): K batches are sent to the
    device at once and `lax.scan`ned over, bit-identical to K single updates; 1 is the reference."""

    def __post_init__(self) -> None:
        _check(0.0 <= self.discount <= 1.0, "LearnerConfig.discount", "in [0, 1]", self.discount)
        _positive_int(self, "num_samples", "target_policy_update_period", "target_critic_update_period",
                      "sgd_steps_per_call")
        _positive(self, "policy_learning_rate", "critic_learning_rate", "dual_learning_rate",
                  "max_gradient_norm")
        modes = typing.get_args(typing.get_type_hints(LearnerConfig)["augmentation"])
        _check(self.augmentation in modes, "LearnerConfig.augmentation", f"one of {list(modes)}",
               self.augmentation)
        if self.target_update_rate is not None:
            _check(0.0 < self.target_update_rate <= 1.0, "LearnerConfig.target_update_rate",
                   "in (0, 1] or None", self.target_update_rate)


@dataclasses.dataclass(frozen=True)
class DMPOConfig:
    """Everything the single-process and distributed agents are built from (algorithm.md §3, §7.1)."""

    batch_size: int = 256
    """Transitions per learner update (one sampled batch)."""
    prefetch_size: int = 4
    """Batches the dataset keeps ready ahead of the learner."""
    min_replay_size: int = 1000
    """Items in replay before the first learner update (learning waits for max(batch size, this)
    env steps)."""
    max_replay_size: int = 1_000_000
    """Replay capacity in items; the oldest item is removed first (FIFO)."""
    samples_per_insert: float | None = 32.0
    """Target ratio of sampled to inserted items. None: no ratio, the distributed learner samples as
    fast as it can once `min_replay_size` items are in (algorithm.md §2 `MinSize`); only the distributed
    program can run that, so a single-process run (`actors=0`) refuses None."""
    n_step: int = 5
    """Steps summed into each n-step transition's discounted reward before bootstrapping."""
    checkpoint: bool = True
    """Write checkpoints; False: none is written, `checkpoint_every` is ignored and the run cannot be
    resumed."""
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    networks: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)

    def __post_init__(self) -> None:
        _positive_int(self, "batch_size", "prefetch_size", "min_replay_size", "max_replay_size", "n_step")
        _check(self.batch_size <= self.max_replay_size, "DMPOConfig.batch_size",
               f"<= max_replay_size ({self.max_replay_size})", self.batch_size)
        _check(self.min_replay_size <= self.max_replay_size, "DMPOConfig.min_replay_size",
               f"<= max_replay_size ({self.max_replay_size})", self.min_replay_size)
        if self.samples_per_insert is not None:
            _positive(self, "samples_per_insert")

    @property
    def min_observations(self) -> int:
        """Environment steps before the first learner step (algorithm.md §3)."""
        return max(self.batch_size, self.min_replay_size)

    @property
    def observations_per_step(self) -> float:
        return self.batch_size / (self.samples_per_insert or self.batch_size)


def control_suite_preset() -> DMPOConfig:
    """`dmpo train --preset control` (the default before 2026-12-04): the
    reference's update ratio; it differs from the reference's `DMPOConfig()` in two values, each taken
    from one of the reference's own launchers (algorithm.md §10): policy and critic learning rate 3e-4 (the
    JAX agent's) instead of 1e-4, and a policy target period of 25 (the distributed control-suite
    launcher's) instead of 100. Measured at 100k steps, 3 seeds (docs/results/learning.md, "`control`
    and `reference`"): cartpole-swingup 766.5, walker-walk 358.5, cheetah-run 160.7."""
    learner = LearnerConfig(policy_learning_rate=3e-4, critic_learning_rate=3e-4,
                            target_policy_update_period=25)
    return DMPOConfig(learner=learner)


def sample_efficient_preset() -> DMPOConfig:
    """`dmpo train`'s default (`--preset fast`): `control_suite_preset()` with four times the updates per
    env step (one per 2 env steps, where the reference makes one per 8 and SAC one per step) on batches
    of 128 (samples per insert 64), a
    critic of 256-256-256 instead of 512-512-256, and K = 4 updates per jitted call. Not the reference's
    values: chosen by a one-change grid and side-by-side runs at batch 256 (docs/results/archive.md) and
    docs/results/time-to-score.md: each update at batch 128 costs half the FLOPs, which on CPU outweighs
    the extra env steps it needs (walker-walk to an evaluation return of 700 in 5.1 min against 7.0,
    median of 3 seeds: `benchmarks/side_by_side.py --summarise` of
    `benchmarks/recorded/side-by-side/walker-walk-b128.json` and `.../walker-walk.json`).

    Its critic support is "auto-gym": the reference's [-150, 150] on dm_control tasks (where every result
    of the preset was measured, and returns lie in [0, 100]), the task's own on `gym:` tasks, whose returns
    [-150, 150] cut off (docs/results/critic-support.md: Hopper-v5 3319 against 845 at 100k steps)."""
    base = control_suite_preset()
    return dataclasses.replace(
        base, batch_size=128, samples_per_insert=64.0,
        learner=dataclasses.replace(base.learner, sgd_steps_per_call=4),
        networks=dataclasses.replace(base.networks, critic_layer_sizes=(256, 256, 256),
                                     vmin="auto-gym", vmax="auto-gym"))


AGENT_PRESETS: dict[str, Callable[[], DMPOConfig]] = {
    "fast": sample_efficient_preset,
    "control": control_suite_preset,
    "reference": DMPOConfig,
}
"""`dmpo train --preset NAME`: the agent config a run starts from before its flags apply."""
