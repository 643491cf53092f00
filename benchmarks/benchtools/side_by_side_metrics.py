"""The metrics and the tables of `benchmarks/side_by_side.py`: pure functions over recorded runs.

A recorded run is a dict (as stored in results.json) with, among others:

    kind, seed, threshold, mean_episodes (the moving mean's window, 10 by default),
    status ("reached", "cap: max steps", "cap: max minutes", "unsupported: ...",
    "failed (exit N)"), seconds (how long it ran), env_steps (the last count seen),
    evaluations   [{env_steps, return, seconds}]   evaluation returns (dmpo evaluator, SAC/TQC lines)
    episodes      [{env_steps, return, seconds}]   training-episode returns (dmpo, Acme)

`seconds` is always wall-clock since the subprocess was launched, when the line or row was first seen,
so every peer is timed the same way whatever its own clock measures. A peer that has no evaluation
(Acme) or no training returns (SAC, TQC) stores None for that list, and its metric is "n/a".
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MOVING_MEAN_EPISODES = 10

EVALUATION = "evaluation"
TRAINING_MEAN = "training_mean"
METRIC_TITLES = {
    EVALUATION: "(a) evaluation return ≥ threshold",
    TRAINING_MEAN: "(b) moving mean of training returns ≥ threshold",
}
# Which peers each metric compares dmpo against: those that measure the same thing.
METRIC_PEERS = {EVALUATION: ("sac", "tqc"), TRAINING_MEAN: ("acme",)}
DMPO_KINDS = ("dmpo", "dmpo-overlap", "dmpo-actors1", "dmpo-actors2")


@dataclass(frozen=True)
class Reached:
    """When a metric was first reached, or (lower_bound) how far a capped run got without reaching it."""

    env_steps: int
    minutes: float
    lower_bound: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps, "minutes": self.minutes, "lower_bound": self.lower_bound}


def moving_mean(points: Sequence[Mapping[str, float]], window: int = MOVING_MEAN_EPISODES) -> list[dict]:
    """The mean return of each `window` consecutive episodes, at the last one's steps and time.

    Only full windows count: one lucky early episode is not a mean of ten.
    """
    means = []
    for end in range(window, len(points) + 1):
        last = points[end - 1]
        value = statistics.fmean(float(p["return"]) for p in points[end - window:end])
        means.append({"env_steps": int(last["env_steps"]), "return": value,
                      "seconds": float(last["seconds"])})
    return means


def first_reached(points: Sequence[Mapping[str, float]], threshold: float) -> Reached | None:
    """The first point whose return is at or above `threshold`, or None."""
    for point in points:
        if float(point["return"]) >= threshold:
            return Reached(int(point["env_steps"]), float(point["seconds"]) / 60.0)
    return None


def metric_points(run: Mapping[str, Any], metric: str) -> list[dict] | None:
    """The points a metric is read from, or None where the peer does not have that measure."""
    if metric == EVALUATION:
        return run.get("evaluations")
    episodes = run.get("episodes")
    if episodes is None:
        return None
    return moving_mean(episodes, int(run.get("mean_episodes", MOVING_MEAN_EPISODES)))


def run_metric(run: Mapping[str, Any], metric: str) -> Reached | None:
    """The metric of one run: when reached, a lower bound if the run was stopped by a cap, else None."""
    points = metric_points(run, metric)
    if points is None:
        return None
    reached = first_reached(points, float(run["threshold"]))
    if reached is not None:
        return reached
    if str(run.get("status", "")).startswith("cap"):
        # It was still short of the threshold when the cap stopped it: all we know is "later than this".
        return Reached(int(run.get("env_steps") or 0), float(run.get("seconds") or 0.0) / 60.0,
                       lower_bound=True)
    return None


def metric_available(run: Mapping[str, Any], metric: str) -> bool:
    return metric_points(run, metric) is not None


def all_reached(run: Mapping[str, Any]) -> bool:
    """True once every metric the run has is reached (the runner then stops it)."""
    metrics = [m for m in METRIC_TITLES if metric_available(run, m)]
    return bool(metrics) and all(
        (r := run_metric(run, m)) is not None and not r.lower_bound for m in metrics)


def env_steps_per_second(run: Mapping[str, Any]) -> float | None:
    """The last env step count seen over the time it was seen at (start-up and evaluation included)."""
    seen = [p for key in ("evaluations", "episodes") for p in (run.get(key) or [])]
    if not seen:
        return None
    last = max(seen, key=lambda p: (p["env_steps"], p["seconds"]))
    return last["env_steps"] / last["seconds"] if last["seconds"] > 0 else None


def median_reached(values: Sequence[Reached | None]) -> Reached | None:
    """The median over seeds; a lower bound where a capped seed is at or below it (it could move it up).

    None if any seed neither reached it nor was capped (an unbounded, unknown value).
    """
    if not values or any(v is None for v in values):
        return None
    minutes = statistics.median(v.minutes for v in values)
    steps = int(statistics.median(v.env_steps for v in values))
    bounded = any(v.lower_bound and v.minutes <= minutes for v in values)
    return Reached(steps, minutes, lower_bound=bounded)


def ratio_cell(peer: Reached | None, dmpo: Reached | None) -> str:
    """Peer minutes ÷ dmpo minutes; "≥" where the peer was capped (its true time is longer)."""
    if peer is None or dmpo is None:
        return "n/a"
    if dmpo.lower_bound:
        # dmpo itself capped: the ratio could be anything below the bound's.
        return "n/a (dmpo capped)" if peer.lower_bound else f"≤ {peer.minutes / dmpo.minutes:.2f}"
    if dmpo.minutes <= 0:
        return "n/a"
    return ("≥ " if peer.lower_bound else "") + f"{peer.minutes / dmpo.minutes:.2f}"


def reached_cell(value: Reached | None, available: bool) -> str:
    if not available:
        return "n/a"
    if value is None:
        return "not reached"
    if value.lower_bound:
        return f"> {value.minutes:.1f} min (> {value.env_steps:,} steps)"
    return f"{value.minutes:.1f} min @ {value.env_steps:,} steps"


def _by_kind(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        kinds.setdefault(run["kind"], []).append(run)
    return kinds


def kind_medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Reached | None]]:
    """Per run kind and metric: the median over its seeds (supported runs only)."""
    medians = {}
    for kind, group in _by_kind(runs).items():
        group = [r for r in group if not str(r.get("status", "")).startswith("unsupported")]
        medians[kind] = {m: median_reached([run_metric(r, m) for r in group]) if group
                         and all(metric_available(r, m) for r in group) else None for m in METRIC_TITLES}
    return medians


def results_markdown(runs: Sequence[Mapping[str, Any]], *, preamble: Sequence[str] = ()) -> str:
    """The per-run table, the per-kind medians and the ratios of the peers' times to dmpo's."""
    lines = list(preamble)
    head_a, head_b = METRIC_TITLES[EVALUATION], METRIC_TITLES[TRAINING_MEAN]
    lines += ["", "## Per run", "",
              f"| run | seed | env steps/s | {head_a} | {head_b} | status | load 1-min start → end |",
              "|---|---|---|---|---|---|---|"]
    for run in sorted(runs, key=lambda r: (r["kind"], r["seed"])):
        speed = env_steps_per_second(run)
        cells = [reached_cell(run_metric(run, m), metric_available(run, m)) for m in METRIC_TITLES]
        load = f"{run['load_start']:.2f} → {run['load_end']:.2f}" if "load_end" in run else ""
        status = run.get("status", "")
        if run.get("episodes_without_row"):
            status += f" ({run['episodes_without_row']} training episodes not logged)"
        lines.append(f"| {run['kind']} | {run['seed']} | {'' if speed is None else f'{speed:.0f}'} | "
                     f"{cells[0]} | {cells[1]} | {status} | {load} |")
    medians = kind_medians(runs)
    lines += ["", "## Median over seeds", "", f"| run | seeds | {head_a} | {head_b} |", "|---|---|---|---|"]
    for kind, group in sorted(_by_kind(runs).items()):
        available = [all(metric_available(r, m) for r in group) for m in METRIC_TITLES]
        cells = [reached_cell(medians[kind][m], ok) for m, ok in zip(METRIC_TITLES, available, strict=True)]
        lines.append(f"| {kind} | {len(group)} | {cells[0]} | {cells[1]} |")
    lines += ["", "## Peer minutes ÷ dmpo minutes", "",
              "(b) is the like-for-like measure against Acme (both read training-episode returns), "
              "(a) against SAC and TQC (all evaluate the deterministic policy). Above 1: dmpo is faster; "
              "\"≥\": the peer was stopped by a cap first.", "",
              "| dmpo run | metric | peer | ratio |", "|---|---|---|---|"]
    for kind in DMPO_KINDS:
        if kind not in medians:
            continue
        for metric, peers in METRIC_PEERS.items():
            for peer in (p for p in peers if p in medians):
                ratio = ratio_cell(medians[peer][metric], medians[kind][metric])
                lines.append(f"| {kind} | {METRIC_TITLES[metric][:3]} | {peer} | {ratio} |")
    return "\n".join(lines) + "\n"
