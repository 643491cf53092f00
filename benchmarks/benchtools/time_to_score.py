"""Time to score: the env steps and the wall-clock time at which a run's evaluation return first
reaches a threshold, read from the run's own log.

Wall-clock per evaluation comes from the evaluator log's `wall_seconds` column (seconds since the run
started, carried across `--resume` in the checkpoint: the time between the last checkpoint and a kill
is not counted, as that work is done again after the resume). Runs logged before that column existed
fall back to the `wall_time` TensorBoard stores with every event of `tb/evaluator/`: one event file per
process; the first process starts at run.json's `start_time`, a resumed one at its file's first
record; a later file's first evaluation step drops the earlier files' events at or past it (as
TensorBoard's purge on resume does), and each process's time runs to its last kept evaluation.

The event files are read with a few lines here rather than with tbparse / TensorBoard (which need the
TensorBoard package): the TFRecord framing is `length u64 | crc u32 | data | crc u32` and each record is
an `Event` protobuf, parsed with the protobuf classes tensorboardX ships to write them. A record cut
short by a kill ends the file's readable part.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dmpo.sweeps.results import DEFAULT_THRESHOLDS

__all__ = ["DEFAULT_THRESHOLDS", "EvaluationTimes", "RunTime", "evaluation_times", "parse_thresholds",
           "run_time", "time_to_score", "time_to_score_csv", "time_to_score_markdown"]

# Evaluation return (policy mean) to reach per task: `dmpo sweep`'s own (its results table reports it too).

_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class EvaluationTimes:
    """One run's evaluations: env steps, mean return and wall seconds since the run started."""

    steps: np.ndarray
    returns: np.ndarray
    wall_seconds: np.ndarray | None
    """None where neither the log nor TensorBoard gives a time for every evaluation."""
    source: str
    """'log' (wall_seconds column), 'tensorboard' (event wall_time) or 'none'."""


def parse_thresholds(items: Sequence[str],
                     base: Mapping[str, float] = DEFAULT_THRESHOLDS) -> dict[str, float]:
    """`TASK=VALUE` items on top of `base`; a one-line ValueError names a malformed item."""
    thresholds = dict(base)
    for item in items:
        task, sep, value = item.partition("=")
        try:
            if not sep or ":" not in task:
                raise ValueError
            thresholds[task] = float(value)
        except ValueError:
            raise ValueError(f"--threshold {item!r}: expected TASK=VALUE, e.g. dmc:walker-walk=700") from None
    return thresholds


def _read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _event_records(path: Path) -> list[bytes]:
    blob = path.read_bytes()
    records, offset = [], 0
    while offset + 12 <= len(blob):
        (length,) = _LENGTH.unpack_from(blob, offset)
        end = offset + 12 + length
        if end + 4 > len(blob):
            break
        records.append(blob[offset + 12:end])
        offset = end + 4
    return records


def _file_events(path: Path, tag: str) -> tuple[float | None, list[tuple[int, float]]]:
    """(wall_time of the file's first record, [(step, wall_time)] of the `tag` scalars)."""
    from tensorboardX.proto.event_pb2 import Event

    start, points = None, []
    for record in _event_records(path):
        try:
            event = Event.FromString(record)
        except Exception:  # a damaged record ends what can be trusted of this file
            break
        start = event.wall_time if start is None else start
        if any(value.tag == tag for value in event.summary.value):
            points.append((int(event.step), float(event.wall_time)))
    return start, points


def tensorboard_wall_seconds(run_dir: str | os.PathLike[str], tag: str = "return_mean") -> dict[int, float]:
    """{env step: wall seconds since the run started} of the evaluator's `tag` events (module doc)."""
    run = Path(run_dir)
    files = sorted((run / "tb" / "evaluator").glob("events.out.tfevents.*"))
    segments = [_file_events(f, tag) for f in files]
    segments = [(start, points) for start, points in segments if points]
    segments.sort(key=lambda s: s[1][0][1])  # process order: by the time of their first evaluation
    info_path = run / "run.json"
    run_start = None
    if info_path.is_file():
        started = json.loads(info_path.read_text(encoding="utf-8")).get("start_time")
        run_start = datetime.datetime.fromisoformat(started).timestamp() if started else None
    for k in range(len(segments) - 1):  # a later process replaces what an earlier one logged past its start
        first_step = segments[k + 1][1][0][0]
        segments[k] = (segments[k][0], [p for p in segments[k][1] if p[0] < first_step])
    result: dict[int, float] = {}
    offset = 0.0
    for k, (start, points) in enumerate(segments):
        origin = run_start if k == 0 and run_start is not None else start
        if origin is None:
            continue
        for step, wall in points:
            result[step] = offset + wall - origin
        if points:
            offset += points[-1][1] - origin
    return result


def evaluation_times(run_dir: str | os.PathLike[str]) -> EvaluationTimes:
    """The evaluations of one run (finished or still running), with their wall time where known."""
    run = Path(run_dir)
    path = run / "logs" / "evaluator" / "logs.csv"
    rows = _read_rows(path) if path.is_file() else []
    rows = [r for r in rows if r.get("actor_steps") and r.get("return_mean")]
    steps = np.array([int(float(r["actor_steps"])) for r in rows], dtype=np.int64)
    returns = np.array([float(r["return_mean"]) for r in rows])
    if rows and all(r.get("wall_seconds") for r in rows):
        return EvaluationTimes(steps, returns, np.array([float(r["wall_seconds"]) for r in rows]), "log")
    times = tensorboard_wall_seconds(run) if rows else {}
    if rows and all(int(s) in times for s in steps):
        return EvaluationTimes(steps, returns, np.array([times[int(s)] for s in steps]), "tensorboard")
    return EvaluationTimes(steps, returns, None, "none")


def time_to_score(times: EvaluationTimes, threshold: float) -> tuple[int, float | None] | None:
    """(env steps, wall seconds or None) of the first evaluation with return >= threshold; None if none."""
    reached = np.flatnonzero(times.returns >= threshold)
    if reached.size == 0:
        return None
    first = int(reached[0])
    wall = None if times.wall_seconds is None else float(times.wall_seconds[first])
    return int(times.steps[first]), wall


# ------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class RunTime:
    """When one run (finished or not) first reached its task's threshold."""

    run: Path
    task: str
    config: str
    seed: int
    status: str
    threshold: float | None
    last_env_steps: int
    reached: tuple[int, float | None] | None
    source: str


def run_time(run: str | os.PathLike[str], task: str, config: str, seed: int, status: str,
             thresholds: Mapping[str, float]) -> RunTime:
    times = evaluation_times(run)
    threshold = thresholds.get(task)
    reached = None if threshold is None else time_to_score(times, threshold)
    last = int(times.steps[-1]) if len(times.steps) else 0
    return RunTime(Path(run), task, config, seed, status, threshold, last, reached, times.source)


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if values else math.inf


def _cell(value: float, digits: int = 0) -> str:
    return "not reached" if math.isinf(value) else f"{value:,.{digits}f}"


def time_to_score_markdown(rows: Sequence[RunTime]) -> str:
    """Per (task, config): runs that reached the threshold, median env steps and minutes (a run that
    has not reached it counts as later than every run that has), and each seed's figures. Minutes
    of a row whose source is 'estimate' (not read from a log: `benchmarks/recorded.py`) read ≈."""
    groups: dict[tuple[str, str], list[RunTime]] = {}
    for row in rows:
        groups.setdefault((row.task, row.config), []).append(row)
    lines = ["| task | config | threshold | reached | env steps: median | wall-clock min: median "
             "| per seed: env steps / min (status, last step) |", "|---|---|---:|---:|---:|---:|---|"]
    for (task, config), members in groups.items():
        threshold = members[0].threshold
        if threshold is None:
            lines.append(f"| {task} | {config} | – (give --threshold {task}=VALUE) | | | | |")
            continue
        steps = [float(r.reached[0]) if r.reached else math.inf for r in members]
        timed = [r for r in members if r.reached is None or r.reached[1] is not None]
        minutes = [r.reached[1] / 60 if r.reached and r.reached[1] is not None else math.inf for r in timed]
        approx = "≈" if any(r.source == "estimate" for r in timed if r.reached) else ""
        seeds = []
        for r in sorted(members, key=lambda r: r.seed):
            if r.reached:
                wall = "?" if r.reached[1] is None else (
                    f"{'≈' if r.source == 'estimate' else ''}{r.reached[1] / 60:.1f}")
                figure = f"{r.reached[0]:,} / {wall}"
            else:
                figure = "–"
            note = "" if r.status == "finished" else f"{r.status}, "
            seeds.append(f"seed {r.seed}: {figure} ({note}{r.last_env_steps:,})")
        reached = sum(1 for r in members if r.reached)
        median_minutes = _median(minutes)
        minutes_cell = ((approx if math.isfinite(median_minutes) else "") + _cell(median_minutes, 1)
                        if timed else "?")
        lines.append(f"| {task} | {config} | {threshold:g} | {reached}/{len(members)} "
                     f"| {_cell(_median(steps))} | {minutes_cell} | {'; '.join(seeds)} |")
    return "\n".join(lines) + "\n"


def time_to_score_csv(rows: Sequence[RunTime]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["task", "config", "seed", "status", "threshold", "last_env_steps",
                     "env_steps_to_threshold", "minutes_to_threshold", "wall_clock_source", "run"])
    for r in rows:
        steps = "" if r.reached is None else r.reached[0]
        minutes = "" if r.reached is None or r.reached[1] is None else f"{r.reached[1] / 60:.3f}"
        threshold = "" if r.threshold is None else f"{r.threshold:g}"
        writer.writerow([r.task, r.config, r.seed, r.status, threshold, r.last_env_steps, steps, minutes,
                         r.source, str(r.run)])
    return buffer.getvalue()
