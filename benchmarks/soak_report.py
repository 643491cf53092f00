"""The chaos soak's figures from what `benchmarks/chaos_soak.py` recorded: RSS growth (by kind of
process, and by process over its own life), the RSS plot, and the table the results page shows.

A kind's RSS over time mixes processes of different ages once recoveries replace them (a learner
started ten minutes ago next to one that ran for an hour), so a leak is judged on each process over
its own life: its RSS once warmed up against its RSS at its end, for the processes that lived long
enough, and again from the last fault to the end (the faults' own cost set apart).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

KINDS = ("learner", "replay", "counter", "actor", "evaluator")
TRACKED = ("dmpo driver", "raylet", "gcs_server")


def tracked(name: str) -> bool:
    return name.startswith("ray::") or name in TRACKED


def rss_growth(rows: list[list[Any]], warmup: float, window: float = 600.0) -> dict[str, list[float]]:
    """Per kind of process: [median RSS (MiB) over the first `window` seconds after `warmup`, median over
    the last `window` seconds, growth]. Each sample is the mean over the kind's processes then (the
    actors, or the successive processes of a node a recovery replaced), so a leak that replacements
    carry on shows as well as one inside a process."""
    samples: dict[str, dict[float, list[float]]] = {}
    for seconds, name, _, rss in rows:
        if tracked(name):
            samples.setdefault(name, {}).setdefault(seconds, []).append(rss)
    end = max((seconds for seconds, *_ in rows), default=0.0)
    growth = {}
    for name, by_time in samples.items():
        means = sorted((seconds, statistics.fmean(values)) for seconds, values in by_time.items())
        early = [rss for seconds, rss in means if warmup <= seconds < warmup + window]
        late = [rss for seconds, rss in means if seconds > end - window]
        if len(early) >= 3 and len(late) >= 3 and end - window > warmup + window:
            first, last = statistics.median(early), statistics.median(late)
            growth[name] = [round(first, 1), round(last, 1), round(last / first - 1, 4)]
    return growth


def process_growth(rows: list[list[Any]], last_fault: float, warmup: float = 300.0,
                   least: float = 900.0) -> dict[str, dict[str, Any]]:
    """Per kind of process, each process on its own (samples every 10 s, medians over a minute):
    `life`, the growth from `warmup` seconds after it was first seen to its end, for the processes that
    lived `least` seconds past that, with the largest growth of the kind (and that process's RSS at
    both ends); `after_faults`, the growth of the processes that lived from `last_fault` (plus one
    minute) to the end, when that span is at least ten minutes long."""
    lives: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for seconds, name, pid, rss in rows:
        if tracked(name):
            lives.setdefault((name, pid), []).append((seconds, rss))
    end = max((seconds for seconds, *_ in rows), default=0.0)

    def around(points: list[tuple[float, float]], at: float) -> float | None:
        near = [rss for seconds, rss in points if at <= seconds < at + 60.0]
        return statistics.median(near) if len(near) >= 3 else None

    def change(first: float, points: list[tuple[float, float]]) -> list[float]:
        last = statistics.median(rss for _, rss in points[-6:])  # its last minute
        return [round(first, 1), round(last, 1), round(last / first - 1, 4)]

    result: dict[str, dict[str, Any]] = {}
    for (name, _), points in sorted(lives.items()):
        points.sort()
        entry = result.setdefault(name, {"processes": 0, "life": None, "after_faults": None})
        born, died = points[0][0], points[-1][0]
        spans = {"life": born + warmup if died - (born + warmup) >= least else None,
                 "after_faults": last_fault + 60.0 if born <= last_fault and died >= end - 30.0
                 and end - (last_fault + 60.0) >= 600.0 else None}
        for key, start in spans.items():
            if start is None or (first := around(points, start)) is None:
                continue
            entry["processes"] += key == "life"
            grown = change(first, points)
            if entry[key] is None or grown[2] > entry[key][2]:
                entry[key] = grown  # the kind's largest growth
    return result


def growth_at_faults(rows: list[list[Any]], faults: list[dict[str, Any]], name: str = "gcs_server",
                     after: float = 120.0) -> list[float] | None:
    """[MiB the process `name` grew from just before each fault to `after` seconds past it (or to the
    next fault, if sooner), summed over the faults; MiB it grew in the spans between]: where its
    growth came from. "Just before" a moment: the mean of its samples in the 30 s before it."""
    points = [(seconds, rss) for seconds, kind, _, rss in rows if kind == name]

    def before(moment: float) -> float | None:
        near = [rss for seconds, rss in points if moment - 30.0 <= seconds < moment]
        return statistics.fmean(near) if near else None

    at_faults = between = 0.0
    times = [fault["seconds"] for fault in faults]
    for index, moment in enumerate(times):
        following = times[index + 1] if index + 1 < len(times) else None
        settled_at = moment + after if following is None else min(moment + after, following)
        first, settled = before(moment), before(settled_at)
        if first is None or settled is None:
            return None
        at_faults += settled - first
        if following is not None and following > settled_at and (next_first := before(following)) is not None:
            between += next_first - settled
    return [round(at_faults, 2), round(between, 2)]


def plot_rss(rows: list[list[Any]], faults: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 5))
    by_name: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for seconds, name, pid, rss in rows:
        by_name.setdefault(name, {}).setdefault(pid, []).append((seconds / 60, rss))
    interesting = sorted(n for n in by_name if tracked(n))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3
    colours = dict(zip(interesting, palette, strict=False))
    for name in sorted(interesting):
        for index, points in enumerate(by_name[name].values()):
            xs, ys = zip(*points, strict=True)
            axis.plot(xs, ys, color=colours[name], linewidth=1, label=name if index == 0 else None)
    for fault in faults:
        axis.axvline(fault["seconds"] / 60, color="grey", linewidth=0.5, linestyle=":")
    axis.set_xlabel("minutes (dotted: a fault)")
    axis.set_ylabel("RSS (MiB), one line per process")
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def same_steps(result: dict[str, Any], every: int = 10_000) -> list[str]:
    """A row per undisturbed run: its evaluation and the soak's at the last evaluation boundary both
    reached (`every`: `dmpo train`'s default --eval-every, which the runs keep)."""
    rows = []
    mine = {steps // every: (steps, value) for steps, value in result.get("evaluations", [])}
    for other in result["undisturbed"]:
        theirs = {steps // every: (steps, value) for steps, value in other.get("evaluations", [])}
        if common := sorted(set(mine) & set(theirs)):
            (a, soak), (b, undisturbed) = mine[common[-1]], theirs[common[-1]]
            rows.append(f"| evaluation near {common[-1] * every:,} env steps: soak ({a:,}) / undisturbed "
                        f"seed {other['seed']} ({b:,}) | {soak:.1f} / {undisturbed:.1f} |")
    return rows


def within_range(result: dict[str, Any]) -> str:
    """Whether the soak's final evaluation lies between the lowest and the highest undisturbed final."""
    others = [u["final"]["return_mean"] for u in result["undisturbed"]
              if u.get("final") and u.get("status") == "finished"]
    mine = (result["final"] or {}).get("return_mean")
    if mine is None or not others:
        return "-"
    low, high = min(others), max(others)
    verdict = "yes" if low <= mine <= high else ("above" if mine > high else "no, below")
    return f"{verdict} ({mine:.1f} in [{low:.1f}, {high:.1f}])"


def table(result: dict[str, Any]) -> str:
    faults = result["faults"]
    # Survived: the run's line for the fault came, and the run went on (a later checkpoint, or the end).
    last_checkpoint = max((c["seconds"] for c in result["checkpoints"]), default=0.0)
    survived = sum(f["answered_after"] is not None and (result["status"] == "finished"
                                                         or last_checkpoint > f["seconds"]) for f in faults)
    redone = sum(r.get("env_steps_redone", 0) for r in result["recoveries"])
    verified = sum(c["verified"] for c in result["checkpoints"])
    growth = result["rss_growth_after_warmup"]
    worst = max(growth.items(), key=lambda item: abs(item[1][2])) if growth else ("-", [0, 0, 0.0])
    finals = [f"{u['final']['return_mean']:.1f} (seed {u['seed']}, {u['final']['env_steps']})"
              for u in result["undisturbed"] if u.get("final") and u.get("status") == "finished"]
    kinds = ", ".join(f"{kind} {sum(f['kind'] == kind for f in faults)}"
                      for kind in [*KINDS, "worker-node"] if any(f["kind"] == kind for f in faults))
    final = result["final"] or {}
    lines = [
        "| measure | value |", "|---|---|",
        f"| run | exit {result['exit']}, run.json `{result['status']}`, "
        f"{result['wall_seconds'] / 60:.1f} min |",
        f"| faults injected | {len(faults)} ({kinds}) |",
        f"| faults survived (the run's line for it came, the run went on) | {survived} of {len(faults)} |",
        f"| recoveries in run.json | {len(result['recoveries'])} |",
        f"| env steps redone | {redone} |",
        f"| checkpoints written / verified when they appeared | {len(result['checkpoints'])} / {verified} |",
        f"| RSS growth after warm-up, largest of {len(growth)} kinds of process | {worst[1][2]:+.1%} "
        f"({worst[0]}) |",
        *process_rows(result.get("process_growth")),
        *([f"| gcs_server growth in the 2 minutes after each fault, summed / between those spans | "
           f"{result['gcs_at_faults'][0]:+.1f} MiB / {result['gcs_at_faults'][1]:+.1f} MiB |"]
          if result.get("gcs_at_faults") else []),
        *([f"| the undisturbed runs' own gcs_server over its life, largest growth | "
           f"{_change(result['undisturbed_gcs'])} |"] if result.get("undisturbed_gcs") else []),
        f"| final evaluation (env steps) | {final.get('return_mean', float('nan')):.1f} "
        f"({final.get('env_steps', '-')}) |",
        f"| undisturbed runs' final evaluations (env steps) | {', '.join(finals) or '-'} |",
        f"| final evaluation within the undisturbed runs' range | {within_range(result)} |",
        *same_steps(result),
    ]
    lives = result.get("process_growth") or {}
    if not lives:
        lines += ["", "| process | RSS after warm-up (MiB) | RSS at the end (MiB) | growth |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {name} | {first:.0f} | {last:.0f} | {change:+.1%} |" for name, (first, last, change) in
                  sorted(growth.items())]
        return "\n".join(lines)
    lines += ["", "| process | kind, after warm-up → end (MiB) | each process over its life: lived long "
              "enough, largest growth (MiB) | from the last fault to the end (MiB) |", "|---|---|---|---|"]
    for name in sorted(set(growth) | set(lives)):
        life = lives.get(name, {})
        lines.append(f"| {name} | {_change(growth.get(name))} | {life.get('processes', 0)}, "
                     f"{_change(life.get('life'))} | {_change(life.get('after_faults'))} |")
    return "\n".join(lines)


def _change(change: list[float] | None) -> str:
    if change is None:
        return "-"
    first, last, growth = change
    return f"{first:.0f} → {last:.0f} ({growth:+.1%})"


def process_rows(lives: dict[str, dict[str, Any]] | None) -> list[str]:
    """The measure table's rows for `process_growth`: the largest growth of a process over its life,
    and from the last fault to the end."""
    if not lives:
        return []
    rows = []
    for key, what in (("life", "RSS growth of a process over its life (after 5 min, lived 15 min more), "
                               "largest"),
                      ("after_faults", "RSS growth from the last fault to the end, largest")):
        found = [(name, entry[key]) for name, entry in lives.items() if entry.get(key)]
        if found:
            name, (_, _, change) = max(found, key=lambda item: item[1][2])
            rows.append(f"| {what} | {change:+.1%} ({name}) |")
    return rows
