"""Few-seed statistics for sweeps and learning benchmarks, through rliable (Agarwal et al., 2021, "Deep RL
at the Edge of the Statistical Precipice"): interquartile mean (IQM) and mean with stratified-bootstrap
intervals, and performance profiles.

* **Per task** (one task, one configuration): IQM and mean of the seeds' values, each with a 95%
  percentile-bootstrap interval over seeds (rliable's bootstrap of one task is a plain bootstrap of the
  seeds). With fewer than `MIN_SEEDS` seeds no interval is given ("n/a (n=2)"): a bootstrap of two
  values only restates them. With 3 seeds the IQM equals the mean (a 25% trim of 3 values cuts none)
  and the interval is about the seeds' range; it says how far the seeds agree, not more.
* **Across tasks**: scores are normalised per task so that tasks weigh alike, then IQM and mean over
  all (seed, task) scores with rliable's *stratified* bootstrap (seeds resampled within each task).
  Normalisation: dm_control (`dmc:`) returns lie in [0, 1000] by construction (per-step rewards in
  [0, 1], 1000 steps), so the score is return / 1000. Other tasks (gym) have no stated maximum and are
  left out of the aggregate (their per-task rows stand). The aggregate takes, per configuration, the
  same number of seeds on every task (the smallest; the lowest seeds where a task has more).
* **Performance profile**: the fraction of (seed, task) runs whose normalised score exceeds tau, with
  its stratified-bootstrap band (rliable's `create_performance_profile`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dmpo.utils.install import install_hint

__all__ = ["MIN_SEEDS", "Aggregate", "Estimate", "aggregate", "normalise", "normalised_task", "per_task",
           "plot_performance_profile", "score_matrix"]

MIN_SEEDS = 3
CONFIDENCE = 0.95
_DMC_MAX_RETURN = 1000.0


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval (None when there are too few seeds for one)."""

    point: float
    interval: tuple[float, float] | None
    n: int

    def cell(self, digits: int = 1) -> str:
        if self.interval is None:
            return f"{self.point:.{digits}f} (interval n/a, n={self.n})"
        low, high = self.interval
        return f"{self.point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def normalised_task(task: str) -> bool:
    """Whether `task`'s returns have a stated normalisation (module doc)."""
    return task.startswith("dmc:")


def normalise(task: str, value: float) -> float:
    if not normalised_task(task):
        raise ValueError(f"{task}: no stated maximum return to normalise by (only dmc: tasks have one)")
    return value / _DMC_MAX_RETURN


def _rliable():
    try:
        from rliable import library, metrics
    except ImportError as error:
        raise ImportError(f"IQM and bootstrap intervals need rliable: {install_hint('sweep')}; "
                          "or the bench extra") from error
    return library, metrics


def _iqm_and_mean(scores: np.ndarray) -> np.ndarray:
    _, metrics = _rliable()
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


@contextlib.contextmanager
def _global_numpy_seed(seed: int):
    """Seed numpy's global generator for the block, then put the caller's state back.

    rliable 1.2's `StratifiedBootstrap.update_indices` draws its resamples with `np.random.choice`, not
    the `random_state` handed to arch, so without this an interval depends on whatever used the global
    generator before (a test's bound changed with the order the suite ran in)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _estimates(scores: np.ndarray, reps: int, seed: int) -> dict[str, Estimate]:
    """IQM and mean of a (runs, tasks) matrix, with stratified-bootstrap intervals from 3 runs on."""
    runs = scores.shape[0]
    points = _iqm_and_mean(scores)
    if runs < MIN_SEEDS:
        return {"iqm": Estimate(float(points[0]), None, runs), "mean": Estimate(float(points[1]), None, runs)}
    library, _ = _rliable()
    with warnings.catch_warnings(), _global_numpy_seed(seed):
        # arch 7 deprecates the random_state rliable 1.2 passes it
        warnings.simplefilter("ignore", FutureWarning)
        _, intervals = library.get_interval_estimates(
            {"x": scores}, _iqm_and_mean, reps=reps, confidence_interval_size=CONFIDENCE,
            random_state=np.random.RandomState(seed))
    low, high = intervals["x"]  # (2 bounds, 2 metrics)
    return {name: Estimate(float(points[i]), (float(low[i]), float(high[i])), runs)
            for i, name in enumerate(("iqm", "mean"))}


def per_task(values: Sequence[float], *, reps: int = 10_000, seed: int = 0) -> dict[str, Estimate]:
    """IQM and mean over the seeds of one task (raw returns), intervals from `MIN_SEEDS` seeds."""
    scores = np.asarray(values, dtype=float).reshape(-1, 1)
    if scores.size == 0 or not np.all(np.isfinite(scores)):
        raise ValueError(f"per_task needs finite values, got {list(values)}")
    return _estimates(scores, reps, seed)


@dataclasses.dataclass(frozen=True)
class Aggregate:
    config: str
    tasks: tuple[str, ...]
    seeds_per_task: int
    iqm: Estimate
    mean: Estimate


def score_matrix(values: Mapping[str, Mapping[int, float]]) -> tuple[tuple[str, ...], np.ndarray]:
    """{task: {seed: return}} → (normalisable tasks, normalised scores (runs, tasks)) with the same,
    smallest, number of seeds per task (the lowest seeds)."""
    tasks = tuple(t for t in values if normalised_task(t) and values[t])
    if not tasks:
        return (), np.zeros((0, 0))
    runs = min(len(values[t]) for t in tasks)
    columns = [[normalise(t, values[t][s]) for s in sorted(values[t])[:runs]] for t in tasks]
    return tasks, np.array(columns, dtype=float).T


def aggregate(values: Mapping[str, Mapping[str, Mapping[int, float]]], *, reps: int = 10_000,
              seed: int = 0) -> list[Aggregate]:
    """Per config (`values[config][task][seed] = return`): IQM and mean of the normalised scores over
    its dmc tasks, when it has two or more of them."""
    rows = []
    for config, by_task in values.items():
        tasks, scores = score_matrix(by_task)
        if len(tasks) < 2:
            continue
        found = _estimates(scores, reps, seed)
        rows.append(Aggregate(config, tasks, scores.shape[0], found["iqm"], found["mean"]))
    return rows


def plot_performance_profile(values: Mapping[str, Mapping[str, Mapping[int, float]]],
                             output: str | os.PathLike[str], *, reps: int = 2000,
                             title: str | None = None) -> Path | None:
    """The performance profile of each config over its normalised dmc scores (None: nothing to plot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from dmpo.utils.files import atomic_write_bytes

    library, _ = _rliable()
    from rliable import plot_utils

    scores, tasks_of = {}, {}
    for config, by_task in values.items():
        tasks, matrix = score_matrix(by_task)
        if matrix.size:
            scores[config], tasks_of[config] = matrix, tasks
    if not scores:
        return None
    tau = np.linspace(0.0, 1.0, 101)
    with _global_numpy_seed(0):  # create_performance_profile draws from NumPy's global generator
        profiles, bands = library.create_performance_profile(scores, tau, reps=reps,
                                                             confidence_interval_size=CONFIDENCE)
    figure = Figure(figsize=(6.4, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    colours = {config: f"C{i % 10}" for i, config in enumerate(scores)}
    plot_utils.plot_performance_profiles(profiles, tau, performance_profile_cis=bands, ax=ax, colors=colours,
                                         xlabel="normalised score τ (dmc return / 1000)",
                                         ylabel="fraction of runs with score > τ")
    handles = [Line2D([], [], color=colours[c]) for c in scores]
    ax.legend(handles, [f"{c} ({scores[c].shape[0]} seeds × {len(tasks_of[c])} tasks)" for c in scores],
              fontsize="small", title=f"{CONFIDENCE:.0%} stratified-bootstrap band", title_fontsize="small")
    if title:
        ax.set_title(title, fontsize="medium")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    output = Path(output)
    atomic_write_bytes(output, buffer.getvalue())
    return output
