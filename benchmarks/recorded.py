"""Restate recorded learning results with the benchmark tool's statistics (rliable), from their curves.

    .venv/bin/python benchmarks/recorded.py benchmarks/recorded/presets-3seeds-100k.json
    .venv/bin/python benchmarks/recorded.py benchmarks/recorded/presets-3seeds-100k.json \
        benchmarks/recorded/fast-seeds34-100k.json
    .venv/bin/python benchmarks/recorded.py --time-to-score benchmarks/recorded/*.json
    .venv/bin/python benchmarks/recorded.py --record bench/fast-seeds34 --commit abc1234 > new.json
    .venv/bin/python benchmarks/recorded.py benchmarks/recorded/fast-b128-sweep-5seeds-100k.json --seeds 0 1 2

Some results in docs/results/ predate `benchtools.statistics` and their run folders were not kept;
their curves were recorded in the text. This script rebuilds each run's final return and area under the
curve from such a file (JSON: `budget`, `eval_every`, and `groups` of {task, config, commit,
env_steps_per_second, curves: {seed: [return at eval_every, 2·eval_every, ...]}}) and prints the same
tables `benchmarks/learning.py` writes to `results.md`: per (task, config) mean and IQM with 95%
bootstrap intervals over seeds, and across the dmc tasks IQM and mean with stratified-bootstrap
intervals. Curves recorded rounded to integers give areas within a few tenths of those of the logs.
Several files are pooled (same budget): groups with the same (task, config) make one row.

--time-to-score prints instead `benchtools.time_to_score`'s table (`DEFAULT_THRESHOLDS`): when each curve
first reaches its task's threshold, in env steps and in minutes. A group may record `wall_minutes`
({seed: [minutes since the run started at each evaluation]}, read from the run's log) and its own
`budget`; without `wall_minutes` the minutes are estimated as env steps / the group's env steps/s
(constant speed assumed), and the table marks them with ≈.

--record FOLDER prints, as a group list for such a file, the runs of a `benchmarks/learning.py`
folder (finished or not): their curves to one decimal, and `wall_minutes` from their logs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchtools.results import (  # noqa: E402
    RunResult,
    find_runs,
    normalised_auc,
    results_markdown,
    summarise,
)
from benchtools.time_to_score import (  # noqa: E402
    DEFAULT_THRESHOLDS,
    EvaluationTimes,
    RunTime,
    evaluation_times,
    time_to_score,
    time_to_score_markdown,
)
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


def pooled(files: Sequence[dict]) -> dict:
    """One recorded file from several with the same budget and evaluation period (their groups joined)."""
    first = files[0]
    for data in files[1:]:
        if (data["budget"], data["eval_every"]) != (first["budget"], first["eval_every"]):
            raise ValueError(f"files to pool need one budget and eval_every, got {first['budget']}/"
                             f"{first['eval_every']} and {data['budget']}/{data['eval_every']}")
    return {**first, "groups": [group for data in files for group in data["groups"]]}


def recorded_times(files: Sequence[dict], thresholds=DEFAULT_THRESHOLDS) -> list[RunTime]:
    """When each recorded curve first reaches its task's threshold (module doc: measured or estimated),
    through `benchtools.time_to_score.time_to_score` as for a run folder."""
    rows = []
    for data in files:
        every = int(data["eval_every"])
        for group in data["groups"]:
            threshold = thresholds.get(group["task"])
            if threshold is None:  # no threshold stated for the task (the gym ones)
                continue
            budget = int(group.get("budget", data["budget"]))
            measured = group.get("wall_minutes", {})
            for seed, curve in group["curves"].items():
                steps = np.arange(1, len(curve) + 1) * every
                if seed in measured:
                    times = EvaluationTimes(steps, np.asarray(curve, float),
                                            60.0 * np.asarray(measured[seed], float), "log")
                else:
                    times = EvaluationTimes(steps, np.asarray(curve, float),
                                            steps / float(group["env_steps_per_second"]), "estimate")
                reached = time_to_score(times, threshold)
                last = int(steps[-1])
                rows.append(RunTime(Path("recorded") / group["config"] / group["task"] / f"seed-{seed}",
                                    group["task"], group["config"], int(seed),
                                    "finished" if last >= budget else "unfinished", threshold, last,
                                    reached, times.source))
    return rows


def only_seeds(data: dict, seeds: Sequence[int]) -> dict:
    """`data` with each group's curves (and wall minutes) cut to `seeds`: a config recorded on more seeds
    set beside one recorded on fewer, seed for seed. A group left with none of them is an error."""
    wanted = {str(seed) for seed in seeds}
    groups = []
    for group in data["groups"]:
        kept = {seed: curve for seed, curve in group["curves"].items() if seed in wanted}
        if not kept:
            raise ValueError(f"{group['task']} / {group['config']}: none of seeds {sorted(seeds)} recorded "
                             f"(it has {sorted(group['curves'], key=int)})")
        trimmed = {**group, "curves": kept}
        if "wall_minutes" in group:
            trimmed["wall_minutes"] = {seed: m for seed, m in group["wall_minutes"].items() if seed in wanted}
        groups.append(trimmed)
    return {**data, "groups": groups}


def record_folder(out: Path, commit: str) -> tuple[int, list[dict]]:
    """The runs of a `benchmarks/learning.py` folder as (eval_every, groups) of a recorded file (module
    doc); the group's env steps/s is its runs' env steps over their wall seconds at the last evaluation."""
    groups: dict[tuple[str, str], dict] = {}
    totals: dict[tuple[str, str], list[float]] = {}  # [env steps, wall seconds] per group
    period = None
    for preset, path in find_runs(out):
        train = json.loads((path / "config.json").read_text(encoding="utf-8"))["config"]
        times = evaluation_times(path)
        if not len(times.steps) or times.wall_seconds is None:
            continue
        every = int(train["eval_every"])
        if list(times.steps) != [every * (i + 1) for i in range(len(times.steps))]:
            raise ValueError(f"{path}: evaluations at {list(times.steps)}, not every {every} env steps from "
                             f"{every}; a recorded curve needs one return per {every} steps")
        if period is not None and every != period:
            raise ValueError(f"{path}: evaluated every {every} env steps, the folder's other runs every "
                             f"{period}; record them apart")
        period, key, seed = every, (train["env"], preset), str(train["seed"])
        group = groups.setdefault(key, {"task": train["env"], "config": preset, "commit": commit,
                                        "budget": int(train["steps"]), "curves": {}, "wall_minutes": {}})
        group["curves"][seed] = [round(float(r), 1) for r in times.returns]
        group["wall_minutes"][seed] = [round(float(w) / 60, 2) for w in times.wall_seconds]
        total = totals.setdefault(key, [0.0, 0.0])
        total[0] += int(times.steps[-1])
        total[1] += float(times.wall_seconds[-1])
    for key, group in groups.items():
        group["env_steps_per_second"] = round(totals[key][0] / totals[key][1], 1)
    return period or 0, list(groups.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="*",
                        help="recorded curves (JSON), e.g. benchmarks/recorded/presets-3seeds-100k.json")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10,000)")
    parser.add_argument("--time-to-score", action="store_true",
                        help="print when each curve first reaches its task's threshold instead")
    parser.add_argument("--record", type=Path, metavar="FOLDER",
                        help="print the runs of a benchmarks/learning.py folder as recorded groups")
    parser.add_argument("--commit", default="unknown", help="with --record: the commit the runs were made at")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="S",
                        help="only these seeds of every recorded group (to compare configs seed for seed)")
    args = parser.parse_args(argv)
    if args.record is not None:
        if not (args.record / "runs").is_dir():
            parser.error(f"--record {args.record}: no runs/ folder there (a benchmarks/learning.py --out)")
        try:
            every, groups = record_folder(args.record, args.commit)
        except ValueError as error:
            parser.error(str(error))
        if not groups:
            parser.error(f"--record {args.record}: no run there has an evaluation with its wall time")
        budget = max(group["budget"] for group in groups)
        about = (f"The runs of {args.record} (benchmarks/learning.py), recorded by benchmarks/recorded.py "
                 f"--record at commit {args.commit}: returns every {every} env steps (policy mean) and the "
                 "run's wall-clock minutes at each evaluation, from its logs.")
        data = {"about": about,
                "budget": budget, "eval_every": every,
                "groups": groups}
        text = json.dumps(data, indent=1)
        # One line per curve: numbers lists are written inline.
        text = re.sub(r"\[\s*([-0-9.,\s]*?)\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
        sys.stdout.write(text + "\n")
        return 0
    if not args.files:
        parser.error("give at least one recorded file (JSON)")
    files = []
    for path in args.files:
        try:
            files.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as error:
            parser.error(f"{path}: not a readable recorded file (JSON): {error}")
    if args.seeds:
        try:
            files = [only_seeds(data, args.seeds) for data in files]
        except ValueError as error:
            parser.error(f"--seeds: {error}")
    if args.time_to_score:
        sys.stdout.write(time_to_score_markdown(recorded_times(files)))
        return 0
    try:
        data = pooled(files)
    except ValueError as error:
        parser.error(str(error))
    sys.stdout.write(tables(data, resamples=args.resamples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
