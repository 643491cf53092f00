"""Restate recorded learning results with the benchmark tool's statistics (rliable), from their curves.

    .venv/bin/python benchmarks/recorded.py benchmarks/recorded/issue13-100k.json

Some results in BENCHMARKS.md predate `dmpo.benchmark_statistics` and their run folders were not kept;
their curves were recorded in the text. This script rebuilds each run's final return and area under the
curve from such a file (JSON: `budget`, `eval_every`, and `groups` of {task, config, commit,
env_steps_per_second, curves: {seed: [return at eval_every, 2·eval_every, ...]}}) and prints the same
tables `benchmarks/learning.py` writes to `results.md`: per (task, config) mean and IQM with 95%
bootstrap intervals over seeds, and across the dmc tasks IQM and mean with stratified-bootstrap
intervals. Curves recorded rounded to integers give areas within a few tenths of those of the logs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dmpo.benchmarking import RunResult, normalised_auc, results_markdown, summarise  # noqa: E402
from learning import aggregate_markdown  # noqa: E402  (the tool's own across-task table)


def recorded_results(data: dict) -> list[RunResult]:
    """One `RunResult` per recorded curve; wall time set so the group's recorded env steps/s comes back."""
    budget, every = int(data["budget"]), int(data["eval_every"])
    results = []
    for group in data["groups"]:
        where = f"{group['task']} / {group['config']}"
        speed = float(group["env_steps_per_second"])
        for seed, curve in group["curves"].items():
            steps = [every * (i + 1) for i in range(len(curve))]
            if not curve or steps[-1] != budget:
                raise ValueError(f"{where} seed {seed}: curves must have one return per {every} steps up to "
                                 f"the budget {budget}, got {len(curve)} values")
            results.append(RunResult(
                run=Path("recorded") / group["config"] / group["task"] / f"seed-{seed}", task=group["task"],
                config=group["config"], seed=int(seed), budget=budget, env_steps=budget,
                final_return=float(curve[-1]), auc_return=normalised_auc(steps, curve),
                evaluations=len(curve), wall_seconds=budget / speed))
    return results


def tables(data: dict, *, resamples: int = 10_000) -> str:
    results = recorded_results(data)
    per_task = results_markdown(summarise(results, resamples=resamples, seed=0))
    return "\n".join(part for part in (per_task, aggregate_markdown(results, resamples)) if part)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path,
                        help="recorded curves (JSON), e.g. benchmarks/recorded/issue13-100k.json")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10,000)")
    args = parser.parse_args(argv)
    with open(args.file, encoding="utf-8") as f:
        data = json.load(f)
    sys.stdout.write(tables(data, resamples=args.resamples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
