"""Per-seed learner diagnostics: what a weak seed logged beside the others of its task.

    .venv/bin/python benchmarks/seed_diagnostics.py bench/fast-seeds34 --task dmc:walker-walk
    .venv/bin/python benchmarks/seed_diagnostics.py runs/a runs/b --windows 5

Reads each run's (finished or not) learner and evaluator logs, from `benchmarks/learning.py` folders
(every run of --task under runs/) or from run directories given directly, and prints one markdown row
per (run, window of env steps): the evaluation return at the window's end and the window's mean of
the learner's dual variables (temperature, mean and stddev KL duals), the KLs relative to their bounds
(E-step distribution `kl_q_rel`, the mean's and the stddev's to the target policy), the policy's
smallest and largest standard deviation, the critic loss, the target probability mass on the
support's edge atoms, and the largest Q. A run whose last evaluation is below `--weak` (0.7) times the
mean last evaluation of the runs shown is marked, so that what such a seed did differently can be read.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from benchtools.results import find_runs
from benchtools.time_to_score import evaluation_times

# (column of logs/learner/logs.csv, header, digits)
COLUMNS = (
    ("dual_temperature", "temperature", 3),
    ("dual_alpha_mean", "α mean", 3),
    ("dual_alpha_stddev", "α stddev", 1),
    ("kl_q_rel", "KL q / ε", 2),
    ("kl_mean_rel", "KL mean / ε", 2),
    ("kl_stddev_rel", "KL std / ε", 2),
    ("pi_stddev_min", "σ min", 3),
    ("pi_stddev_max", "σ max", 3),
    ("critic_loss", "critic loss", 3),
    ("critic/edge_mass", "edge mass", 4),
    ("q_max", "Q max", 1),
)


def _float(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except ValueError:
        return math.nan


def learner_rows(run: Path) -> list[dict[str, float]]:
    path = run / "logs" / "learner" / "logs.csv"
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: _float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if math.isfinite(v)]
    return sum(kept) / len(kept) if kept else math.nan


def _cell(value: float, digits: int) -> str:
    return "–" if not math.isfinite(value) else f"{value:.{digits}f}"


def diagnostics(runs: Sequence[tuple[str, Path]], windows: int, weak: float) -> str:
    """The markdown table the module doc describes; `runs` are (label, run directory)."""
    readings = []
    for label, run in runs:
        times = evaluation_times(run)
        if not len(times.steps):
            continue
        readings.append((label, run, times, learner_rows(run)))
    if not readings:
        raise ValueError("no run with an evaluation among those given")
    finals = [float(times.returns[-1]) for _, _, times, _ in readings]
    mean_final = sum(finals) / len(finals)
    span = max(int(times.steps[-1]) for _, _, times, _ in readings)
    edges = [round(span * (k + 1) / windows) for k in range(windows)]
    header = ["run", "last eval", "env steps", "eval return", *(name for _, name, _ in COLUMNS)]
    lines = [f"Mean last evaluation {mean_final:.1f} over {len(readings)} runs; ⚠ below {weak:g}× that "
             f"({weak * mean_final:.1f}).", "", "| " + " | ".join(header) + " |",
             "|---|" + "---:|" * (len(header) - 1)]
    for (label, _, times, rows), final in zip(readings, finals, strict=True):
        mark = " ⚠" if final < weak * mean_final else ""
        start = 0
        for edge in edges:
            window = [r for r in rows if start < r.get("actor_steps", math.nan) <= edge]
            evaluated = [i for i, s in enumerate(times.steps) if s <= edge]
            value = _cell(float(times.returns[evaluated[-1]]), 1) if evaluated else "–"
            cells = [_cell(_mean([r.get(column, math.nan) for r in window]), digits)
                     for column, _, digits in COLUMNS]
            row = [f"{label}{mark}", f"{final:.1f}", f"{start:,}–{edge:,}", value, *cells]
            lines.append("| " + " | ".join(row) + " |")
            start = edge
    return "\n".join(lines) + "\n"


def _runs(paths: Sequence[Path], task: str | None) -> list[tuple[str, Path]]:
    found = []
    for path in paths:
        if (path / "runs").is_dir():
            for preset, run in find_runs(path):
                config = json.loads((run / "config.json").read_text(encoding="utf-8")).get("config", {})
                if task is None or config.get("env") == task:
                    found.append((f"{preset} {config.get('env')} seed {config.get('seed')}", run))
        elif (path / "logs").is_dir():
            found.append((path.name, path))
        else:
            raise SystemExit(f"seed_diagnostics.py: error: {path} is neither a benchmarks/learning.py folder "
                             "(runs/) nor a run directory (logs/)")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", type=Path, nargs="+", help="benchmark folders or run directories")
    parser.add_argument("--task", help="only the runs of this task (in benchmark folders)")
    parser.add_argument("--windows", type=int, default=4, help="windows of env steps per run (default 4)")
    parser.add_argument("--weak", type=float, default=0.7,
                        help="mark runs below this fraction of the mean last evaluation (default 0.7)")
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error(f"--windows must be a positive integer, got {args.windows}")
    try:
        sys.stdout.write(diagnostics(_runs(args.paths, args.task), args.windows, args.weak))
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
