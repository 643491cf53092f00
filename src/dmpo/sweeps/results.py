"""A sweep's results table, read from its run directories (never written into them).

Per trial (`OUT/<point>/seed-<S>/`): its status, env steps reached, the final and the best evaluation
return, the env steps and wall-clock minutes at which the evaluation return first reached the task's
threshold (where one is known: `DEFAULT_THRESHOLDS`, or `dmpo sweep --threshold`) and its wall-clock
minutes (the run's own `wall_seconds`, carried across resumes). Per grid point, over its finished seeds:
the interquartile mean (IQM) and the mean of the final return with rliable's 95% bootstrap intervals
(`dmpo.sweeps.statistics.per_task`; no interval below 3 seeds).

Files: `results.csv` (per trial), `points.csv` (per grid point) and `results.md` (both tables).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from dmpo.utils.files import atomic_write_text
from dmpo.utils.formats import SWEEP_POINT, read_header

__all__ = [
    "DEFAULT_THRESHOLDS",
    "PointSummary",
    "TrialResult",
    "find_trials",
    "read_trial",
    "evaluation_rows",
    "run_status",
    "summarise_points",
    "sweep_runs",
    "write_results",
]

# Evaluation return (policy mean) that counts as solving a task, for the time-to-threshold columns.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "dmc:cartpole-swingup": 800.0,
    "dmc:walker-walk": 700.0,
    "dmc:cheetah-run": 500.0,
    "dmc:ball_in_cup-catch": 900.0,
}


def evaluation_rows(run: Path) -> list[dict[str, str]]:
    """The complete rows of a run's evaluator log (a row still being written is left for later)."""
    path = run / "logs" / "evaluator" / "logs.csv"
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", newline="") as file:
        text = file.read()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return [row for row in csv.DictReader(text.splitlines()) if row.get("return_mean")]


def run_status(run: Path) -> str | None:
    """run.json's status ("running", "finished", "failed", "interrupted"), None without a readable one."""
    try:
        return json.loads((run / "run.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class TrialResult:
    point: str
    seed: int
    run: Path
    status: str
    env: str
    env_steps: int
    final_return: float | None
    best_return: float | None
    threshold: float | None
    threshold_steps: int | None
    threshold_minutes: float | None
    wall_minutes: float | None
    flags: tuple[str, ...]


def find_trials(out: Path) -> list[Path]:
    """Every trial folder `OUT/<point>/seed-<S>` (folders set aside as `.incomplete-<k>` left out)."""
    found = [
        path
        for path in Path(out).glob("*/seed-*")
        if path.is_dir() and ".incomplete-" not in path.name and path.name[5:].isdigit()
    ]
    return sorted(found, key=lambda p: (p.parent.name, int(p.name[5:])))


def _point_flags(run: Path) -> tuple[str, ...]:
    path = run.parent / "flags.json"
    if path.is_file():
        record = json.loads(path.read_text(encoding="utf-8"))
        read_header(record, SWEEP_POINT, str(path))
        return tuple(record.get("flags", ()))
    return ()


def read_trial(
    run: Path, thresholds: Mapping[str, float] | None = None, pruned: Sequence[str] = ()
) -> TrialResult:
    """One trial's row; `pruned` names the run folders a scheduler stopped early."""
    thresholds = DEFAULT_THRESHOLDS if thresholds is None else thresholds
    rows = evaluation_rows(run)
    try:
        env = json.loads((run / "config.json").read_text(encoding="utf-8"))["config"].get("env", "")
    except (OSError, ValueError, KeyError):
        env = ""
    status = run_status(run) or "not started"
    if str(run) in pruned and status != "finished":
        status = "pruned"
    returns = [float(r["return_mean"]) for r in rows]
    steps = [int(float(r["actor_steps"])) for r in rows]
    walls = [float(r["wall_seconds"]) if r.get("wall_seconds") else None for r in rows]
    threshold = thresholds.get(env)
    reached = next(
        (i for i, value in enumerate(returns) if threshold is not None and value >= threshold), None
    )
    return TrialResult(
        point=run.parent.name,
        seed=int(run.name[5:]),
        run=run,
        status=status,
        env=env,
        env_steps=max([*steps[-1:], _checkpointed_steps(run)], default=0),
        final_return=returns[-1] if returns else None,
        best_return=max(returns) if returns else None,
        threshold=threshold,
        threshold_steps=steps[reached] if reached is not None else None,
        threshold_minutes=(
            walls[reached] / 60 if reached is not None and walls[reached] is not None else None
        ),
        wall_minutes=walls[-1] / 60 if walls and walls[-1] is not None else None,
        flags=_point_flags(run),
    )


def _checkpointed_steps(run: Path) -> int:
    """The env steps of the run's newest checkpoint (0: none): a trial stopped (pruned, interrupted)
    after its last evaluation holds more than that evaluation's steps, and resumes from them."""
    folder = run / "checkpoints"  # complete checkpoints only: one being written has a temporary name
    names = [path.name[5:].split("-")[0] for path in folder.glob("step_*")] if folder.is_dir() else []
    return max((int(name) for name in names if name.isdigit()), default=0)


@dataclasses.dataclass(frozen=True)
class PointSummary:
    point: str
    seeds: int
    finished: int
    iqm: str
    mean: str
    iqm_value: float | None


def summarise_points(trials: Sequence[TrialResult], *, resamples: int = 10_000) -> list[PointSummary]:
    """Per grid point: IQM and mean of the finished seeds' final returns, with bootstrap intervals."""
    from dmpo.sweeps.statistics import per_task

    by_point: dict[str, list[TrialResult]] = {}
    for trial in trials:
        by_point.setdefault(trial.point, []).append(trial)
    summaries = []
    for point, members in by_point.items():
        finals = [t.final_return for t in members if t.status == "finished" and t.final_return is not None]
        if finals:
            found = per_task(finals, reps=resamples)
            iqm, mean, value = found["iqm"].cell(), found["mean"].cell(), found["iqm"].point
        else:
            iqm = mean = "n/a (no finished seed)"
            value = None
        summaries.append(PointSummary(point, len(members), len(finals), iqm, mean, value))
    return summaries


def _cell(value: object, digits: int = 1) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


_TRIAL_COLUMNS = (
    "point",
    "seed",
    "status",
    "env_steps",
    "final_return",
    "best_return",
    "threshold",
    "threshold_steps",
    "threshold_minutes",
    "wall_minutes",
    "run_dir",
)


def _trial_cells(trial: TrialResult) -> list[str]:
    return [
        trial.point,
        str(trial.seed),
        trial.status,
        str(trial.env_steps),
        _cell(trial.final_return),
        _cell(trial.best_return),
        _cell(trial.threshold, 0),
        _cell(trial.threshold_steps),
        _cell(trial.threshold_minutes, 2),
        _cell(trial.wall_minutes, 2),
        str(trial.run),
    ]


def csv_text(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A CSV table (header, then rows) as text, each line ended by a newline."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(row) for row in rows)]


def write_results(
    out: Path, trials: Sequence[TrialResult], *, resamples: int = 10_000, preamble: Sequence[str] = ()
) -> list[PointSummary]:
    """Writes results.csv, points.csv and results.md under `out`; returns the grid points' summaries."""
    points = summarise_points(trials, resamples=resamples)
    trial_rows = [_trial_cells(t) for t in trials]
    point_header = ("point", "seeds", "finished", "IQM final return [95% CI]", "mean final return [95% CI]")
    point_rows = [[p.point, str(p.seeds), str(p.finished), p.iqm, p.mean] for p in points]
    atomic_write_text(out / "results.csv", csv_text(_TRIAL_COLUMNS, trial_rows))
    atomic_write_text(out / "points.csv", csv_text(point_header, point_rows))
    shown = [[*row[:-1], Path(row[-1]).relative_to(out).as_posix()] for row in trial_rows]
    text = [
        f"# Sweep {out.name}",
        "",
        *preamble,
        "",
        "## Grid points",
        "",
        *_markdown(point_header, point_rows),
        "",
        "IQM and mean over the finished seeds of each point, with rliable's 95% bootstrap interval "
        "(none below 3 seeds).",
        "",
        "## Trials",
        "",
        *_markdown(_TRIAL_COLUMNS, shown),
        "",
        "threshold_steps / threshold_minutes: the first evaluation at or above the threshold; "
        "empty where the task has none or the run has not reached it.",
    ]
    atomic_write_text(out / "results.md", "\n".join(text) + "\n")
    return points


def sweep_runs(out: Path) -> list[Path]:
    """A sweep's trial folders that have logged an evaluation (what `dmpo plot OUT` draws)."""
    return [run for run in find_trials(out) if evaluation_rows(run)]
