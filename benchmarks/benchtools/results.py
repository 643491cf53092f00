"""Learning benchmarks: per-run figures read from run folders, and their mean over seeds with a
percentile-bootstrap confidence interval; the results table (CSV, markdown) and a figure of curves.

For each run (`dmpo.lifecycle.directory` layout) the evaluator log `logs/evaluator/logs.csv` gives

* the **final return**: `return_mean` of the last evaluation row;
* the **area under the curve**: the trapezoid integral of `return_mean` over `actor_steps`, divided by
  the span of `actor_steps`, so it is in return units (a run that held return R throughout scores R);
* the **speed**: environment steps reached divided by the run's wall time.

Over the seeds of one (task, configuration) the interquartile mean and the mean are reported with
95% bootstrap intervals from rliable (`benchtools.statistics`, which also aggregates across tasks);
with fewer than 3 seeds there is no interval. Such an interval never leaves the range of the seeds, and
with 3 seeds it is about that range, so with few seeds it says how far they agree, not more. The curves'
shaded bands are a pointwise percentile bootstrap of the mean (`bootstrap_ci`). The launcher is
`benchmarks/learning.py`.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dmpo.reporting.plotting import interpolate_curves, load_curve, shared_range, spanning_curves
from dmpo.sweeps.results import csv_text
from dmpo.utils.files import atomic_write_bytes, atomic_write_text

__all__ = [
    "GroupSummary",
    "RunResult",
    "bootstrap_ci",
    "find_runs",
    "normalised_auc",
    "plot_benchmark",
    "plot_wallclock",
    "read_run",
    "results_markdown",
    "run_wall_seconds",
    "summarise",
    "write_results_csv",
    "write_runs_csv",
]


def find_runs(out: Path) -> list[tuple[str, Path]]:
    """(preset, folder) of every run folder `out/runs/<preset>/<task or grid point>/seed-<S>` (folders
    set aside as `.incomplete-<k>` excluded): `benchmarks/learning.py` runs one `dmpo sweep` per preset
    into `out/runs/<preset>`, whose trials lie at `env=<task>/seed-<S>`."""
    return [(path.parent.parent.name, path) for path in sorted((out / "runs").glob("*/*/seed-*"))
            if path.is_dir() and ".incomplete-" not in path.name]


def _resample_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n): how often each of n samples is drawn in each bootstrap resample."""
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    counts = np.zeros((resamples, n))
    np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)
    return counts


def bootstrap_ci(samples: Sequence[float] | np.ndarray, *, confidence: float = 0.95,
                 resamples: int = 10_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap interval of the mean over axis 0 of `samples` (seeds along axis 0).

    The resamples are drawn from `np.random.default_rng(seed)`: `integers(0, n, (resamples, n))`, one row
    per resample. A 1-D input gives scalars (0-d arrays); an (n, T) input gives one interval per column,
    all from the same resamples. Returns (low, high).
    """
    values = np.asarray(samples, dtype=float)
    if values.ndim == 0 or values.shape[0] == 0:
        raise ValueError(f"bootstrap_ci needs at least one sample along axis 0, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError("bootstrap_ci: samples must be finite")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    n = values.shape[0]
    counts = _resample_counts(n, resamples, seed)
    means = counts @ values.reshape(n, -1) / n  # (resamples, T): the mean of each resample
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=0)
    shape = values.shape[1:]
    return low.reshape(shape), high.reshape(shape)


def normalised_auc(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Trapezoid area under y(x) divided by the span of x (x ascending); one point gives its y."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"normalised_auc needs two equal-length non-empty 1-D arrays, "
                         f"got shapes {x.shape} and {y.shape}")
    if np.any(np.diff(x) < 0):
        raise ValueError("normalised_auc: x must be ascending")
    if x.size == 1 or x[-1] == x[0]:
        return float(y.mean())
    area = float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)
    return area / float(x[-1] - x[0])


# ------------------------------------------------------------------------------------------- one run


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one finished training run contributes to the table."""

    run: Path
    task: str
    config: str
    """The label it is grouped under (a preset name)."""
    seed: int
    budget: int
    """`TrainConfig.steps` the run was given."""
    env_steps: int
    """Environment steps at its last evaluation (at least the budget: the last episode is finished)."""
    final_return: float
    auc_return: float
    evaluations: int
    wall_seconds: float | None
    """Wall time of the `dmpo train` process(es), None where unknown."""

    @property
    def env_steps_per_second(self) -> float | None:
        return self.env_steps / self.wall_seconds if self.wall_seconds else None


def _read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_wall_seconds(run_dir: str | os.PathLike[str]) -> float | None:
    """end_time − start_time of run.json for a finished run never resumed (else None: a resumed run's
    times include the pause)."""
    info = _read_json(Path(run_dir) / "run.json")
    if info.get("status") != "finished" or info.get("resumes") or "end_time" not in info:
        return None
    start = datetime.datetime.fromisoformat(info["start_time"])
    end = datetime.datetime.fromisoformat(info["end_time"])
    return (end - start).total_seconds()


def read_run(run_dir: str | os.PathLike[str], config: str, *, wall_seconds: float | None = None) -> RunResult:
    """Reads one run folder: task, seed and budget from config.json, figures from the evaluator log.
    Without `wall_seconds`, the wall time comes from run.json (`run_wall_seconds`)."""
    run = Path(run_dir)
    saved = _read_json(run / "config.json")
    train = saved.get("config", {})
    missing = [k for k in ("env", "seed", "steps") if k not in train]
    if missing:
        raise ValueError(f"{run / 'config.json'} is not a TrainConfig: no field(s) {missing}")
    curve = load_curve(run, x="actor_steps", y="return_mean", label_source="evaluator")
    if wall_seconds is None:
        wall_seconds = run_wall_seconds(run)
    return RunResult(run=run, task=train["env"], config=config, seed=int(train["seed"]),
                     budget=int(train["steps"]), env_steps=int(curve.x[-1]), final_return=float(curve.y[-1]),
                     auc_return=normalised_auc(curve.x, curve.y), evaluations=len(curve.x),
                     wall_seconds=wall_seconds)


# ---------------------------------------------------------------------------------------- over seeds


@dataclasses.dataclass(frozen=True)
class GroupSummary:
    """One row of the results table: the seeds of one task under one configuration."""

    task: str
    config: str
    seeds: tuple[int, ...]
    budgets: tuple[int, ...]
    final_returns: tuple[float, ...]
    final_mean: float
    final_ci: tuple[float, float] | None
    """95% bootstrap interval of the mean over seeds (rliable); None with fewer than 3 seeds."""
    auc_returns: tuple[float, ...]
    auc_mean: float
    auc_ci: tuple[float, float] | None
    final_iqm: float
    final_iqm_ci: tuple[float, float] | None
    env_steps_per_second: float | None
    """Environment steps of all timed seeds over their total wall time."""

    @property
    def minutes_per_100k_steps(self) -> float | None:
        rate = self.env_steps_per_second
        return 100_000 / rate / 60 if rate else None


def summarise(results: Sequence[RunResult], *, resamples: int = 10_000, seed: int = 0) -> list[GroupSummary]:
    """One summary per (task, config), in the order they first appear in `results`; seeds sorted.
    Intervals: rliable's 95% bootstrap over seeds (`benchtools.statistics.per_task`)."""
    from benchtools.statistics import per_task

    groups: dict[tuple[str, str], list[RunResult]] = {}
    for result in results:
        groups.setdefault((result.task, result.config), []).append(result)
    summaries = []
    for (task, config), members in groups.items():
        members = sorted(members, key=lambda r: r.seed)
        seeds = [r.seed for r in members]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"{task} / {config}: seed listed twice among {[str(r.run) for r in members]}")
        finals = [r.final_return for r in members]
        aucs = [r.auc_return for r in members]
        timed = [r for r in members if r.wall_seconds]
        seconds = sum(r.wall_seconds or 0.0 for r in timed)
        rate = sum(r.env_steps for r in timed) / seconds if timed else None
        final, auc = per_task(finals, reps=resamples, seed=seed), per_task(aucs, reps=resamples, seed=seed)
        summaries.append(GroupSummary(
            task=task, config=config, seeds=tuple(seeds), budgets=tuple(r.budget for r in members),
            final_returns=tuple(finals), final_mean=final["mean"].point, final_ci=final["mean"].interval,
            auc_returns=tuple(aucs), auc_mean=auc["mean"].point, auc_ci=auc["mean"].interval,
            final_iqm=final["iqm"].point, final_iqm_ci=final["iqm"].interval,
            env_steps_per_second=rate))
    return summaries


# ------------------------------------------------------------------------------------------- outputs


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _bounds(interval: tuple[float, float] | None) -> list[str]:
    return ["", ""] if interval is None else [f"{interval[0]:.4f}", f"{interval[1]:.4f}"]


def write_results_csv(path: str | os.PathLike[str], summaries: Sequence[GroupSummary]) -> None:
    """One row per (task, config); `*_ci_*` are 95% bootstrap bounds over seeds, empty below 3 seeds."""
    header = ["task", "config", "n_seeds", "seeds", "budget", "final_mean", "final_ci_low", "final_ci_high",
              "auc_mean", "auc_ci_low", "auc_ci_high", "final_per_seed", "auc_per_seed",
              "env_steps_per_second", "minutes_per_100k_steps", "final_iqm", "final_iqm_ci_low",
              "final_iqm_ci_high"]
    rows = [[s.task, s.config, len(s.seeds), " ".join(map(str, s.seeds)),
             " ".join(map(str, sorted(set(s.budgets)))), f"{s.final_mean:.4f}", *_bounds(s.final_ci),
             f"{s.auc_mean:.4f}", *_bounds(s.auc_ci),
             " ".join(f"{v:.4f}" for v in s.final_returns), " ".join(f"{v:.4f}" for v in s.auc_returns),
             _number(s.env_steps_per_second, 3), _number(s.minutes_per_100k_steps, 3),
             f"{s.final_iqm:.4f}", *_bounds(s.final_iqm_ci)] for s in summaries]
    atomic_write_text(path, csv_text(header, rows))


def write_runs_csv(path: str | os.PathLike[str], results: Sequence[RunResult]) -> None:
    header = ["task", "config", "seed", "budget", "env_steps", "evaluations", "final_return", "auc_return",
              "wall_seconds", "env_steps_per_second", "run"]
    rows = [[r.task, r.config, r.seed, r.budget, r.env_steps, r.evaluations, f"{r.final_return:.4f}",
             f"{r.auc_return:.4f}", _number(r.wall_seconds, 1), _number(r.env_steps_per_second, 3),
             str(r.run)]
            for r in results]
    atomic_write_text(path, csv_text(header, rows))


def _ci_cell(interval: tuple[float, float] | None, n: int) -> str:
    return f"n/a (n={n})" if interval is None else f"[{interval[0]:.1f}, {interval[1]:.1f}]"


def results_markdown(summaries: Sequence[GroupSummary], *, preamble: Sequence[str] = ()) -> str:
    """A markdown table, one row per (task, config), below the `preamble` lines."""
    ci = "95% bootstrap CI over seeds"
    lines = [*preamble, "" if preamble else None,
             f"| task | config | seeds | final return: mean | {ci} | final return: IQM | {ci} "
             f"| AUC return: mean | {ci} | final per seed | env steps/s | min / 100k steps |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summaries:
        n = len(s.seeds)
        lines.append(
            f"| {s.task} | {s.config} | {n} ({', '.join(map(str, s.seeds))}) "
            f"| **{s.final_mean:.1f}** | {_ci_cell(s.final_ci, n)} "
            f"| {s.final_iqm:.1f} | {_ci_cell(s.final_iqm_ci, n)} "
            f"| {s.auc_mean:.1f} | {_ci_cell(s.auc_ci, n)} "
            f"| {', '.join(f'{v:.1f}' for v in s.final_returns)} "
            f"| {_number(s.env_steps_per_second) or '–'} | {_number(s.minutes_per_100k_steps) or '–'} |")
    return "\n".join(line for line in lines if line is not None) + "\n"


def plot_benchmark(groups: Mapping[str, Mapping[str, Sequence[str | os.PathLike[str]]]],
                   output: str | os.PathLike[str], *, confidence: float = 0.95, resamples: int = 10_000,
                   seed: int = 0, num_points: int = 200, title: str | None = None) -> Path:
    """One panel per task (`groups[task][config] = run folders`): per config the mean evaluation return
    over seeds against actor steps, with its pointwise bootstrap interval shaded (2+ seeds)."""
    if not groups or not any(groups.values()):
        raise ValueError("plot_benchmark needs at least one task with runs")
    panels = {}
    for task, configs in groups.items():  # every log is read and checked before anything is drawn
        lines = {}
        for config, runs in configs.items():
            curves = spanning_curves([load_curve(run, x="actor_steps", y="return_mean",
                                                 label_source="evaluator") for run in runs])
            grid, values = interpolate_curves(curves, num_points=num_points)
            low, high = bootstrap_ci(values, confidence=confidence, resamples=resamples, seed=seed)
            lines[config] = (len(curves), grid, values.mean(axis=0), low, high)
        panels[task] = lines
    return _draw_panels(panels, Path(output), title, f"{confidence:.0%}")


def plot_wallclock(groups: Mapping[str, Mapping[str, Sequence[str | os.PathLike[str]]]],
                   output: str | os.PathLike[str], *, confidence: float = 0.95, resamples: int = 10_000,
                   seed: int = 0, num_points: int = 200, title: str | None = None) -> Path | None:
    """As `plot_benchmark`, against the wall-clock minutes of each evaluation (`benchtools.time_to_score`);
    runs without a known wall time are left out, and None is returned when no run has one. A config
    whose runs share no stretch of wall-clock time (a run that others slowed down may end before another
    first evaluates) has no mean to draw: it is left out, with one line on stderr."""
    from benchtools.time_to_score import evaluation_times
    from dmpo.reporting.plotting import Curve

    panels: dict[str, dict[str, tuple]] = {}
    for task, configs in groups.items():
        for config, runs in configs.items():
            curves = []
            for run in runs:
                times = evaluation_times(run)
                if times.wall_seconds is not None and len(times.steps):
                    curves.append(Curve(Path(run), times.wall_seconds / 60.0, times.returns, "wall minutes"))
            if curves:
                curves = spanning_curves(curves)
                start, end = shared_range(curves)
                if len(curves) > 1 and not start < end:  # e.g. one run slowed down by others beside it
                    print(f"wall-clock figure: {task} / {config} left out: its runs' evaluations share no "
                          f"stretch of wall-clock minutes (the latest first one at {start:.1f}, the earliest "
                          f"last one at {end:.1f}); the time-to-score table has each run's minutes",
                          file=sys.stderr)
                    continue
                grid, values = interpolate_curves(curves, num_points=num_points)
                low, high = bootstrap_ci(values, confidence=confidence, resamples=resamples, seed=seed)
                panels.setdefault(task, {})[config] = (len(curves), grid, values.mean(axis=0), low, high)
    if not panels:
        return None
    return _draw_panels(panels, Path(output), title, f"{confidence:.0%}", xlabel="wall-clock minutes")


def _draw_panels(panels: Mapping[str, Mapping[str, tuple]], output: Path, title: str | None,
                 pct: str, xlabel: str = "actor steps") -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(4.6 * columns, 3.4 * rows + 0.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    configs = list(dict.fromkeys(c for lines in panels.values() for c in lines))
    colours = {c: f"C{i % 10}" for i, c in enumerate(configs)}  # one colour per config on every panel
    for ax, (task, lines) in zip(axes, panels.items(), strict=False):
        for config, (count, grid, mean, low, high) in lines.items():
            ax.plot(grid, mean, color=colours[config], label=config)
            if count > 1:
                ax.fill_between(grid, low, high, color=colours[config], alpha=0.2, linewidth=0)
        counts = sorted({v[0] for v in lines.values()})
        seeds = f"{counts[0]} seeds" if len(counts) == 1 else "seeds: " + ", ".join(
            f"{config} {v[0]}" for config, v in lines.items())
        ax.set_title(f"{task} ({seeds})", fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("evaluation return")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=colours[c]) for c in configs]
    figure.legend(handles, configs, loc="outside lower center", ncols=min(len(configs), 4), fontsize="small",
                  title=f"mean over seeds, {pct} bootstrap interval shaded")
    if title:
        figure.suptitle(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(output, buffer.getvalue())
    return output
