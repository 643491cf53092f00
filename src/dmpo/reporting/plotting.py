"""Learning curves from run directories: one line per group of runs (seeds), with a spread band.

Reads `<run>/logs/<label>/logs.csv` (see `dmpo.reporting.logging.CSVLogger`), optionally smooths each
run with a trailing moving average, interpolates the runs of a group onto a common x grid (where they
all have data), and draws the mean with a min–max, ±std or 95%-confidence band (named in the
legend), optionally with each run's own curve. Runs are grouped by default when their config.json
files are equal up to `seed` fields and the step budget. Drawing uses matplotlib's Agg canvas directly,
so no display and no global pyplot state are involved.
"""

from __future__ import annotations

import csv
import io
import json
import os
import textwrap
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dmpo.utils.files import atomic_write_bytes

__all__ = ["BAND_NAMES", "Curve", "aggregate_curves", "group_runs", "interpolate_curves", "load_curve",
           "shared_range", "spanning_curves",
           "plot_figure", "plot_runs", "smooth"]

_STEP_PREFERENCE = ("actor_steps", "steps", "evaluator_steps", "learner_steps")


class Curve:
    """One run's (x, y) points, sorted by x."""

    def __init__(self, run: Path, x: np.ndarray, y: np.ndarray, x_key: str) -> None:
        self.run, self.x, self.y, self.x_key = run, x, y, x_key


def _read_columns(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _to_float(cell: str | None) -> float:
    try:
        return float(cell) if cell not in (None, "") else np.nan
    except ValueError:
        return np.nan


def _resolve_x(x: str, columns: list[str], path: Path) -> str:
    if x in columns:
        return x
    candidates = [c for c in _STEP_PREFERENCE if c in columns]
    candidates += [c for c in columns if c.endswith("_steps") and c not in candidates]
    if not candidates:
        raise ValueError(f"{path}: no column {x!r} and no step column to fall back to; "
                         f"columns are {columns}")
    warnings.warn(f"{path}: no column {x!r}; using {candidates[0]!r} as x", stacklevel=3)
    return candidates[0]


def load_curve(run_dir: str | os.PathLike[str], *, x: str = "actor_steps", y: str = "episode_return",
               label_source: str = "evaluator") -> Curve:
    """Reads one run's curve; errors name the file and the columns it has."""
    run = Path(run_dir)
    path = run / "logs" / label_source / "logs.csv"
    if not path.is_file():
        found = sorted(p.parent.name for p in (run / "logs").glob("*/logs.csv"))
        raise FileNotFoundError(f"{run}: no {label_source!r} log at {path}; logs found: {found}")
    columns, rows = _read_columns(path)
    if y not in columns:
        raise ValueError(f"{path}: no column {y!r}; columns are {columns}")
    x_key = _resolve_x(x, columns, path)
    xs = np.array([_to_float(row.get(x_key)) for row in rows])
    ys = np.array([_to_float(row.get(y)) for row in rows])
    keep = np.isfinite(xs) & np.isfinite(ys)
    if not keep.any():
        raise ValueError(f"{path}: no row has numbers in both {x_key!r} and {y!r}")
    order = np.argsort(xs[keep], kind="stable")
    return Curve(run, xs[keep][order], ys[keep][order], x_key)


def _check_window(window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"smoothing window must be a positive integer, got {window!r}")


Spread = Literal["minmax", "std", "ci95"]
BAND_NAMES = {"minmax": "min–max", "std": "mean ± std", "ci95": "95% CI of the mean (t)"}
"""What the shaded band of each `spread` shows, as the legend says it."""


def _check_spread(spread: str) -> None:
    if spread not in BAND_NAMES:
        raise ValueError(f"spread must be one of {sorted(BAND_NAMES)}, got {spread!r}")


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average: point i is the mean of points max(0, i-window+1) … i."""
    _check_window(window)
    sums = np.cumsum(np.concatenate([[0.0], values]))
    idx = np.arange(1, len(values) + 1)
    start = np.maximum(idx - window, 0)
    return (sums[idx] - sums[start]) / (idx - start)


def shared_range(curves: Sequence[Curve]) -> tuple[float, float]:
    """(latest first x, earliest last x) of the curves: the x range they all cover when first < last."""
    return max(float(c.x[0]) for c in curves), min(float(c.x[-1]) for c in curves)


def interpolate_curves(curves: Sequence[Curve], *, num_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(grid, values): the curves linearly interpolated onto `num_points` x values spanning the range
    they all cover; `values[i]` is curve i. A single curve is returned on its own x values."""
    if not curves:
        raise ValueError("interpolate_curves needs at least one curve")
    if len(curves) == 1:
        return curves[0].x, curves[0].y[None, :]
    lo, hi = shared_range(curves)
    if not lo < hi:
        raise ValueError(f"runs {[str(c.run) for c in curves]} share no x range to average over "
                         f"({curves[0].x_key} from {lo} to {hi})")
    grid = np.linspace(lo, hi, num_points)
    return grid, np.stack([np.interp(grid, c.x, c.y) for c in curves])


def spanning_curves(curves: Sequence[Curve]) -> list[Curve]:
    """The curves with at least two points (the longest one if none has): a run that is still going may
    have logged a single evaluation, which shares no x range with the others' curves."""
    spanning = [curve for curve in curves if len(curve.x) >= 2]
    return spanning or [max(curves, key=lambda curve: len(curve.x))]


def aggregate_curves(curves: Sequence[Curve], *, num_points: int = 200, spread: Spread = "minmax"
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(grid, mean, low, high) of the curves linearly interpolated onto a grid over their common x range.

    The band is the min and max (`minmax`), mean ± population std (`std`), or the 95% confidence
    interval of the mean from Student's t with n - 1 degrees of freedom and the sample std (`ci95`).
    A single curve is returned on its own x values with low == high == mean. Curves of one point are
    left out beside longer ones (`spanning_curves`).
    """
    _check_spread(spread)
    curves = spanning_curves(curves)
    if len(curves) == 1:
        c = curves[0]
        return c.x, c.y, c.y, c.y
    grid, values = interpolate_curves(curves, num_points=num_points)
    mean = values.mean(axis=0)
    if spread == "std":
        std = values.std(axis=0)
        return grid, mean, mean - std, mean + std
    if spread == "ci95":
        from scipy import stats  # a dependency of jax

        count = len(values)
        half = stats.t.ppf(0.975, count - 1) * values.std(axis=0, ddof=1) / np.sqrt(count)
        return grid, mean, mean - half, mean + half
    return grid, mean, values.min(axis=0), values.max(axis=0)


def _config_of(run: Path) -> dict[str, Any] | None:
    path = run / "config.json"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: json.dumps(data)}


def _show(encoded: str | None, rounded: bool = True) -> str:
    """A flattened (JSON-encoded) config value for a legend: strings unquoted, missing as '-', floats
    to 4 significant digits when `rounded` (`vmax=162.3`, not `vmax=162.32634255290017`)."""
    if encoded is None:
        return "-"
    value = json.loads(encoded)
    if isinstance(value, float) and rounded:
        return format(value, ".4g")
    return value if isinstance(value, str) else encoded


# Runs that differ only in these are seeds of one setting: the seed, and the budget (`--steps`; a
# run extended with --resume, or launched with another budget, still averages with its siblings).
_NOT_GROUPED = ("seed", "config.steps")


def _without_seeds(flat: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat.items() if k.rsplit(".", 1)[-1] != "seed" and k not in _NOT_GROUPED}


def _default_groups(runs: Sequence[Path]) -> dict[str, list[Path]]:
    """Runs with equal config.json (ignoring seed fields and the step budget) form a group; labelled
    by what differs (`all runs` when nothing does)."""
    keyed: dict[str, list[Path]] = {}
    settings: dict[str, dict[str, Any]] = {}
    for run in runs:
        config = _config_of(run)
        if config is None:
            keyed.setdefault(f"run:{run}", []).append(run)
            continue
        flat = _without_seeds(_flatten(config))
        key = json.dumps(flat, sort_keys=True)
        keyed.setdefault(key, []).append(run)
        settings[key] = flat
    differing = sorted({name for a in settings.values() for b in settings.values()
                        for name in set(a) | set(b) if a.get(name) != b.get(name)})
    def label(key: str, rounded: bool) -> str:
        short = _short_names(differing)
        return ", ".join(f"{short[name]}={_show(settings[key].get(name), rounded)}" for name in differing)

    labels = {}
    for key, members in keyed.items():
        if key not in settings:
            labels[key] = members[0].name
        else:
            labels[key] = label(key, rounded=True) if differing else "all runs"
    if len(set(labels.values())) < len(labels):  # values that differ only past the rounding: in full
        labels = {key: label(key, rounded=False) if key in settings else name for key, name in labels.items()}
    return {labels[key]: members for key, members in keyed.items()}


def group_runs(runs: Sequence[str | os.PathLike[str]],
               group_by: str | Callable[[Path], str] | None = None) -> dict[str, list[Path]]:
    """Groups runs: by config equality up to seeds (None), by a dotted config field such as
    `"config.learner.discount"`, or by a function of the run folder."""
    paths = [Path(r) for r in runs]
    if group_by is None:
        return _default_groups(paths)
    groups: dict[str, list[Path]] = {}
    for run in paths:
        if callable(group_by):
            label = str(group_by(run))
        else:
            flat = _flatten(_config_of(run) or {})
            if group_by not in flat:
                raise KeyError(f"{run / 'config.json'} has no field {group_by!r}; fields are {sorted(flat)}")
            label = f"{group_by.removeprefix('config.')}={_show(flat[group_by])}"
        groups.setdefault(label, []).append(run)
    return groups


def plot_figure(
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    x: str = "actor_steps",
    y: str = "episode_return",
    label_source: str = "evaluator",
    group_by: str | Callable[[Path], str] | None = None,
    smoothing: int = 1,
    spread: Spread = "minmax",
    per_seed: bool = False,
    num_points: int = 200,
    title: str | None = None,
) -> Any:
    """The matplotlib `Figure` of `plot_runs` (not saved): one mean curve per group of runs, its
    spread shaded (the legend's title names the band), each run's own curve too with `per_seed`.

    All curves are loaded and checked before anything is drawn; a missing log or column raises an
    error naming the file and the columns it has. The title names the task(s) of the runs.
    """
    if not run_dirs:
        raise ValueError("plot_runs needs at least one run directory")
    _check_window(smoothing)
    _check_spread(spread)
    groups = group_runs(run_dirs, group_by)
    curves = {label: [load_curve(r, x=x, y=y, label_source=label_source) for r in members]
              for label, members in groups.items()}
    x_keys = {c.x_key for cs in curves.values() for c in cs}
    if len(x_keys) > 1:
        raise ValueError(f"runs use different x columns {sorted(x_keys)}; pass x= explicitly")
    smoothed = {label: [Curve(c.run, c.x, smooth(c.y, smoothing), c.x_key) for c in cs]
                for label, cs in curves.items()}
    aggregated = {label: aggregate_curves(cs, num_points=num_points, spread=spread)
                  for label, cs in smoothed.items()}
    if title is None:
        configs = [(_config_of(Path(r)) or {}).get("config", {}) for r in run_dirs]
        tasks = sorted({str(config.get("env", "")) for config in configs} - {""})
        title = f"{', '.join(tasks) + ': ' if tasks else ''}{y} ({label_source})"
    y_label = y if smoothing == 1 else f"{y}, mean of the last {smoothing} points"
    return _draw(smoothed, aggregated, x_keys.pop(), y_label, title, spread, per_seed)


def plot_runs(run_dirs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str],
              **options: Any) -> Path:
    """Draws `plot_figure(run_dirs, **options)` and saves it as a PNG at `output`."""
    figure = plot_figure(run_dirs, **options)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(output, buffer.getvalue())
    return output


def _short_names(names: Sequence[str]) -> dict[str, str]:
    """Legend names: a field's last component (`policy_learning_rate`) unless two differing fields share
    it, then its path below `config.` (`agent.learner.discount`)."""
    last = [name.rsplit(".", 1)[-1] for name in names]
    return {name: tail if last.count(tail) == 1 else name.removeprefix("config.")
            for name, tail in zip(names, last, strict=True)}


def _draw(curves: Mapping[str, Sequence[Curve]], aggregated: Mapping[str, tuple[np.ndarray, ...]],
          x_label: str, y_label: str, title: str, spread: str, per_seed: bool) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    banded = False
    for label, (grid, mean, low, high) in aggregated.items():
        runs = curves[label]
        averaged = spanning_curves(runs)
        count = len(averaged)
        name = f"{label}: mean of {count} runs" if count > 1 else f"{label}: {averaged[0].run.name}"
        # A curve of one point (a run with one evaluation so far) draws no line: it gets a marker.
        (line,) = axes.plot(grid, mean, label=name, linewidth=2.0 if per_seed else 1.5,
                            marker="o" if len(grid) == 1 else None)
        if count > 1:
            axes.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
            banded = True
        if per_seed and count > 1:
            for curve in runs:
                axes.plot(curve.x, curve.y, color=line.get_color(), linewidth=0.7, alpha=0.5)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    # Below the axes, wrapped: labels that list several differing settings would squeeze the plot.
    handles, labels = axes.get_legend_handles_labels()
    legend_title = f"shaded: {BAND_NAMES[spread]} over runs" if banded else None
    if per_seed and banded:
        legend_title += "; thin lines: single runs"
    figure.legend(handles, [textwrap.fill(label, 90) for label in labels], loc="outside lower center",
                  fontsize="small", title=legend_title, title_fontsize="small")
    return figure
