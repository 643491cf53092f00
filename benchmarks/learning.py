"""Learning benchmark: `dmpo train` on tasks × seeds × presets at one budget, then a results table.

    .venv/bin/python benchmarks/learning.py --tasks dmc:cartpole-swingup dmc:walker-walk dmc:cheetah-run \\
        --seeds 0 1 2 --steps 100000 --preset fast reference --out bench/dmc-100k
    .venv/bin/python benchmarks/learning.py --out bench/dmc-100k --summarise-only
    .venv/bin/python benchmarks/learning.py --tasks gym:HalfCheetah-v5 --seeds 0 1 2 --out bench/gym \\
        -- --agent.networks.vmin -500 --agent.networks.vmax 1500   # after `--`: flags for every run

Each preset is one `dmpo sweep` (`python -m dmpo.cli sweep`) into --out/runs/<preset>, its tasks a grid
over `--env` and its seeds the sweep's: every (task, seed) is an ordinary `dmpo train` run directory
runs/<preset>/env=<task>/seed-<S>/ (`:` in the task is `_`), run as a Ray Tune trial, `--jobs` at a time;
bench.json records the commands. It then writes, from the finished runs the command names (with
--summarise-only: every finished run under --out, or those --tasks / --preset / --seeds name):

    results.csv   one row per (task, preset): final and area-under-curve return, mean / IQM and 95% CI
    runs.csv      one row per run
    results.md    the tables for docs/results/ (per task; across dmc tasks; time to score), with the
                  commands that made them on top
    curves.png    one panel per task: mean evaluation return per preset, its interval shaded
    curves_wallclock.png   the same against wall-clock minutes
    performance_profile.png   rliable's performance profile over the dmc tasks (return / 1000)
    time_to_score.csv / .md   per run (finished or not) and per (task, preset): the env steps and
                  wall-clock minutes at which the evaluation return first reaches the task's threshold
                  (`benchtools.time_to_score.DEFAULT_THRESHOLDS`, or --threshold TASK=VALUE)

The figures are defined in `benchtools.results`. Running the same command again continues an interrupted
benchmark, as `dmpo sweep` does: finished runs are left as they are, unfinished ones resumed from their
checkpoint; a folder without a checkpoint is renamed `seed-<S>.incomplete-<k>` (kept) and started again.
A preset's sweep folder made with other settings (budget, evaluation, extra flags) is an error before
anything starts: use another --out. Speed is environment steps over the run's own wall time (its log's
`wall_seconds`: start-up, compilation and evaluation included); runs sharing the machine (--jobs > 1) each
run slower.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from benchtools.results import (
    RunResult,
    find_runs,
    plot_benchmark,
    plot_wallclock,
    read_run,
    results_markdown,
    summarise,
    write_results_csv,
    write_runs_csv,
)
from benchtools.time_to_score import (
    DEFAULT_THRESHOLDS,
    RunTime,
    evaluation_times,
    parse_thresholds,
    run_time,
    time_to_score_csv,
    time_to_score_markdown,
)

# A preset is a named set of extra `dmpo train` flags; adding one is adding a line. The first three are
# `dmpo train --preset NAME` itself; the others are the points of the time-to-score grid
# (docs/results/time-to-score.md), each one change to the `fast` of its day, kept so that their folders
# stay readable and each runs again what was measured under its name.
FAST_BATCH_256 = ("--preset", "fast", "--agent.batch-size", "256", "--agent.samples-per-insert", "128")
"""`fast` until 2026-12-05 (batch 256, samples per insert 128): the base of the grid points before it."""
PRESETS: dict[str, tuple[str, ...]] = {
    # `dmpo train`'s default (`sample_efficient_preset()`: batch 128, samples per insert 64,
    # critic 256-256-256).
    "fast": ("--preset", "fast"),
    # `control_suite_preset()`: the reference's values but learning rates 3e-4, policy target period 25.
    "control": ("--preset", "control"),
    # The reference's `DMPOConfig()`.
    "reference": ("--preset", "reference"),
    # The former default: `fast` with batch 256 at samples per insert 128 (the same updates per env step,
    # each twice the FLOPs).
    "fast-b256": FAST_BATCH_256,
    # Fewer actions sampled per next state (N = 10 instead of 20): half the target-critic rows.
    "fast-n10": (*FAST_BATCH_256, "--agent.learner.num-samples", "10"),
    # Larger learning rates, policy and critic (TD3's 1e-3 instead of 3e-4).
    "fast-lr1e-3": (*FAST_BATCH_256, "--agent.learner.policy-learning-rate", "1e-3",
                    "--agent.learner.critic-learning-rate", "1e-3"),
    # One update per env step (SAC's ratio) on a smaller critic, 256-256, to pay for it.
    "fast-spi256": (*FAST_BATCH_256, "--agent.samples-per-insert", "256",
                    "--agent.networks.critic-layer-sizes", "256", "256"),
    # MPO's decoupled trust region (Abdolmaleki et al., 2018): a looser bound on the mean's KL (4x),
    # the standard deviation's kept tight, so that the mean can move faster without collapsing exploration.
    "fast-eps-mean": (*FAST_BATCH_256, "--agent.learner.mpo.epsilon-mean", "0.01"),
    # Half the batch at half the samples per insert: the same updates per env step (one per two), each
    # half the FLOPs (docs/results/time-to-score.md, "Half the batch"). The default since.
    "fast-b128": ("--preset", "fast", "--agent.batch-size", "128", "--agent.samples-per-insert", "64"),
    # Half the batch at the former samples per insert: the former default's FLOPs per env step, twice its
    # updates.
    "fast-b128-spi128": (*FAST_BATCH_256, "--agent.batch-size", "128"),
    # A LayerNorm before every hidden activation of the policy and the critic (SimBa's and BRO's networks
    # for SAC), where the reference normalises after the first layer only.
    "fast-ln": ("--preset", "fast", "--agent.networks.layer-norm", "every"),
    # A floor of 0.3 on the E-step temperature: weak seeds' temperature fell to about 0.1 at 20-40k env
    # steps, where the others' stayed near 0.35 (benchmarks/seed_diagnostics.py).
    "fast-tmin": ("--preset", "fast", "--agent.learner.mpo.min-temperature", "0.3"),
    # Targets Polyak-averaged every update (rate 0.005, SAC's) instead of copied every 25 (policy) and
    # 100 (critic) updates.
    "fast-polyak": ("--preset", "fast", "--agent.learner.target-update-rate", "0.005"),
    # State observations standardised by running statistics of the sampled batches (SimBa's input
    # normalisation for SAC), where the reference feeds them raw.
    "fast-obsnorm": ("--preset", "fast", "--agent.networks.normalize-observations"),
    # The layers after the first in residual blocks with a LayerNorm on each layer (BRO's networks for
    # SAC), at the same sizes and FLOPs as the default.
    "fast-residual": ("--preset", "fast", "--agent.networks.residual"),
    # The E-step temperature started at about 0.31 (a raw dual of -1 through the softplus), near where
    # the seeds that learn well keep it at 20-40k env steps (about 0.35), instead of about 10: the
    # E-step weights are not near uniform while the dual falls from 10 over the first updates.
    "fast-t0.3": ("--preset", "fast", "--agent.learner.mpo.init-log-temperature", "-1.0"),
}
DEFAULT_PRESET = "fast"
"""What the tool runs without --preset: `dmpo train`'s own default."""
# Set by the tool itself for every run, so they may not appear among the extra flags.
_OWN_FLAGS = ("--preset", "--env", "--seed", "--steps", "--eval-every", "--eval-episodes", "--run-dir",
              "--resume", "--progress", "--no-progress", "--actors")


def train_settings(task: str, seed: int | str, args: argparse.Namespace, preset: str,
                   extra: Sequence[str]) -> tuple[str, ...]:
    return ("--env", task, "--seed", str(seed), "--steps", str(args.steps), "--eval-every",
            str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
            # Only when distributed: single-process runs keep the settings (and folders) they had.
            *(("--actors", str(args.actors)) if getattr(args, "actors", 0) else ()), *PRESETS[preset], *extra)


def _shown(path: str) -> str:
    """A path as typed from the current folder when it lies below it."""
    with contextlib.suppress(ValueError):
        return os.path.relpath(path) if Path(path).absolute().is_relative_to(Path.cwd()) else path
    return path


def now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class Manifest:
    """bench.json: the commands that launched the benchmark (time, commit, machine, `dmpo sweep` commands)."""

    def __init__(self, out: Path) -> None:
        self.path = out / "bench.json"
        self.data: dict = {"commands": []}
        if self.path.is_file():
            self.data = {"commands": json.loads(self.path.read_text(encoding="utf-8")).get("commands", [])}

    def add_command(self, entry: dict) -> None:
        from dmpo.lifecycle.directory import atomic_write_json

        self.data["commands"].append(entry)
        atomic_write_json(self.path, self.data)


def sweep_command(out: Path, preset: str, args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    """The `dmpo sweep` of one preset: its tasks as a grid over --env, its seeds, into `out/runs/<preset>`."""
    flags = train_settings("TASK", "SEED", args, preset, extra)[4:]  # without --env TASK --seed SEED
    return [sys.executable, "-m", "dmpo.cli", "sweep", str(out / "runs" / preset),
            "--seeds", *map(str, args.seeds), "--grid", "env=" + ",".join(args.tasks),
            "--max-concurrent", str(args.jobs), "--", *flags]


def _passing_sigint_to(process: subprocess.Popen):
    return lambda signum, frame: process.send_signal(signal.SIGINT)


def run_sweeps(out: Path, args: argparse.Namespace, extra: Sequence[str]) -> tuple[int, list[str]]:
    """Runs one `dmpo sweep` per preset, in turn; returns (130 if stopped else 0, presets that failed).

    A Ctrl-C reaches the sweep too (same process group) and a SIGTERM is passed on to it as SIGINT: the
    sweep stops its trials resumably, and so does this tool."""
    failed = []
    for preset in args.preset:
        command = sweep_command(out, preset, args, extra)
        print(f"preset {preset}: {shlex.join(command)}", flush=True)
        process = subprocess.Popen(command)
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, _passing_sigint_to(process))}
        try:
            code = process.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if code in (130, -signal.SIGINT, -signal.SIGTERM):
            return 130, failed
        if code != 0:
            failed.append(preset)
    return 0, failed


# ---------------------------------------------------------------------------------------- arguments


def build_parser() -> argparse.ArgumentParser:
    presets = "; ".join(f"{name}: {shlex.join(flags) or '(no flags)'}" for name, flags in PRESETS.items())
    parser = argparse.ArgumentParser(
        prog="benchmarks/learning.py", description=__doc__.splitlines()[0],
        epilog=f"Presets (extra `dmpo train` flags) -- {presets}. Flags after `--` go to every run.")
    parser.add_argument("--tasks", nargs="+", metavar="TASK",
                        help="e.g. dmc:cartpole-swingup gym:HalfCheetah-v5 my_pkg.envs:make_env")
    parser.add_argument("--seeds", nargs="+", type=int, metavar="S", help="training seeds (default: 0 1 2)")
    parser.add_argument("--steps", type=int, default=100_000,
                        help="environment steps per run (default 100000)")
    parser.add_argument("--preset", nargs="+", metavar="NAME", help=f"one or more of {list(PRESETS)} "
                        f"(default: {DEFAULT_PRESET})")
    parser.add_argument("--out", type=Path, required=True, help="benchmark folder, e.g. bench/dmc-100k")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--eval-every", type=int, default=10_000, help="steps between evaluations (10000)")
    parser.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation (default 5)")
    parser.add_argument("--actors", type=int, default=0,
                        help="distributed actors per run (`dmpo train --actors N`, on Ray); 0: one process")
    parser.add_argument("--summarise-only", action="store_true",
                        help="only rebuild the table and figure from the runs under --out "
                             "(--tasks / --preset / --seeds then filter)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    defaults = ", ".join(f"{task}={value:g}" for task, value in DEFAULT_THRESHOLDS.items())
    parser.add_argument("--threshold", action="append", default=[], metavar="TASK=VALUE",
                        help="evaluation return for the time-to-score table, e.g. dmc:walker-walk=700 "
                             f"(repeatable; defaults: {defaults})")
    return parser


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parses the tool's options (before `--`) and returns the extra `dmpo train` flags (after it)."""
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = build_parser()
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1:]
    unknown = [p for p in args.preset or () if p not in PRESETS]
    if unknown:
        parser.error(f"--preset: unknown preset(s) {unknown}; known presets are {list(PRESETS)}")
    if not args.summarise_only and not args.tasks:
        parser.error("--tasks: give at least one task, e.g. --tasks dmc:cartpole-swingup")
    bad_tasks = [t for t in args.tasks or () if ":" not in t]
    if bad_tasks:
        parser.error(f"--tasks: {bad_tasks} are not task names such as dmc:cartpole-swingup, "
                     "gym:Pendulum-v1 or an entry point my_pkg.envs:make_env")
    if args.seeds is not None and (len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0):
        parser.error(f"--seeds must be distinct integers >= 0, got {args.seeds}")
    for name in ("steps", "jobs", "eval_every", "eval_episodes", "resamples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.actors < 0:
        parser.error(f"--actors must be an integer >= 0, got {args.actors}")
    try:
        args.thresholds = parse_thresholds(args.threshold)
    except ValueError as error:
        parser.error(str(error))
    own = [flag for flag in extra if flag.split("=", 1)[0] in _OWN_FLAGS]
    if own:
        parser.error(f"the flags after `--` may not set {own}: the benchmark sets {list(_OWN_FLAGS)} itself")
    if not args.summarise_only:
        args.preset = args.preset or [DEFAULT_PRESET]
        args.seeds = [0, 1, 2] if args.seeds is None else args.seeds
    return args, extra


def train_config(flags: Sequence[str]):
    """The TrainConfig `dmpo train FLAGS` would run: `--preset NAME` (if given) picks the agent the other
    flags apply to, as in `dmpo.cli.main`. Raises SystemExit (tyro's message printed) or ConfigError."""
    import tyro

    from dmpo.config import AGENT_PRESETS, TrainConfig

    flags, preset = list(flags), None
    if "--preset" in flags:
        at = flags.index("--preset")
        preset = flags[at + 1] if at + 1 < len(flags) else None
        del flags[at:at + 2]
    if preset is not None and preset not in AGENT_PRESETS:
        raise SystemExit(f"unknown agent preset {preset!r}; `dmpo train` has {list(AGENT_PRESETS)}")
    default = TrainConfig(agent=AGENT_PRESETS[preset]()) if preset else TrainConfig()
    return tyro.cli(TrainConfig, args=flags, default=default, prog="dmpo train")


def check_train_flags(flags: Sequence[str], what: str) -> None:
    """Parses `flags` as `dmpo train` would (into a TrainConfig); exits naming `what` if they are refused."""
    from dmpo.config import ConfigError

    try:
        train_config(flags)
    except SystemExit as error:  # tyro has printed what it refused
        raise SystemExit(f"learning.py: error: `dmpo train` refuses the flags of {what}: "
                         f"{shlex.join(flags)}") from error
    except ConfigError as error:
        raise SystemExit(f"learning.py: error: {what}: {error}") from error


# ------------------------------------------------------------------------------------------- results


def _git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" + uncommitted changes" if dirty else "")


def _machine() -> str:
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, load average {load}"


def _task_of(run: Path) -> str | None:
    try:
        return json.loads((run / "config.json").read_text(encoding="utf-8"))["config"]["env"]
    except (OSError, ValueError, KeyError):
        return None


def _logged_wall_seconds(run: Path) -> float | None:
    """The run's own wall time at its last evaluation (`wall_seconds`, carried across resumes)."""
    times = evaluation_times(run)
    return float(times.wall_seconds[-1]) if times.wall_seconds is not None and len(times.steps) else None


def collect(out: Path, manifest: Manifest, args: argparse.Namespace) -> tuple[list[RunResult], list[str]]:
    """The finished runs under `out` that --tasks / --preset / --seeds name (all where not given), and
    the names of those that are not finished or cannot be read."""
    seeds = {f"seed-{s}" for s in args.seeds} if args.seeds is not None else None
    results, unfinished = [], []
    for preset, path in find_runs(out):
        wanted = ((not args.preset or preset in args.preset)
                  and (not args.tasks or _task_of(path) in args.tasks)
                  and (seeds is None or path.name in seeds))
        if not wanted:
            continue
        key = path.relative_to(out / "runs").as_posix()
        status = json.loads((path / "run.json").read_text(encoding="utf-8")).get("status") \
            if (path / "run.json").is_file() else "not started"
        if status != "finished":
            unfinished.append(f"{key} ({status})")
            continue
        try:
            results.append(read_run(path, preset, wall_seconds=_logged_wall_seconds(path)))
        except (OSError, ValueError) as error:
            unfinished.append(f"{key} (unreadable: {error})")
    order = [*(args.tasks or ()), *(t for c in manifest.data["commands"] for t in c.get("tasks", ()))]
    presets = [*(args.preset or ()), *PRESETS]

    def rank(result: RunResult) -> tuple:
        task = order.index(result.task) if result.task in order else len(order)
        preset = presets.index(result.config) if result.config in presets else len(presets)
        return task, result.task, preset, result.config, result.seed

    return sorted(results, key=rank), unfinished


def collect_times(out: Path, args: argparse.Namespace) -> list[RunTime]:
    """Every run under `out` that --tasks / --preset / --seeds name and that has logged an evaluation,
    finished or not, with when it first reached its task's threshold."""
    seeds = {f"seed-{s}" for s in args.seeds} if args.seeds is not None else None
    rows = []
    for preset, path in find_runs(out):
        wanted = ((not args.preset or preset in args.preset)
                  and (not args.tasks or _task_of(path) in args.tasks)
                  and (seeds is None or path.name in seeds))
        if not wanted or not (path / "config.json").is_file():
            continue
        train = json.loads((path / "config.json").read_text(encoding="utf-8")).get("config", {})
        info = path / "run.json"
        status = json.loads(info.read_text(encoding="utf-8")).get("status", "?") if info.is_file() else "?"
        try:
            row = run_time(path, train["env"], preset, int(train["seed"]), status, args.thresholds)
        except (OSError, ValueError, KeyError):
            continue
        if row.last_env_steps:
            rows.append(row)
    return sorted(rows, key=lambda r: (r.task, r.config, r.seed))


def write_time_to_score(out: Path, rows: Sequence[RunTime], resamples: int) -> str:
    """time_to_score.csv / .md and curves_wallclock.png for `rows`; returns the markdown section."""
    from dmpo.utils.files import atomic_write_text

    if not rows:
        return ""
    unfinished = sum(1 for r in rows if r.status != "finished")
    sources = sorted({r.source for r in rows})
    section = "\n".join([
        "Time to score: the env steps and wall-clock minutes of the first evaluation whose return (policy "
        "mean) reaches the task's threshold; wall-clock from the run's own log (`wall_seconds`, or "
        f"TensorBoard event times for older runs; here: {', '.join(sources)}), counted from the run's start, "
        "a resumed run's pause not counted. Runs sharing the machine (--jobs > 1) each run slower."
        + (f" {unfinished} run(s) not finished: their figures so far." if unfinished else ""), "",
        time_to_score_markdown(rows)])
    atomic_write_text(out / "time_to_score.md", section)
    atomic_write_text(out / "time_to_score.csv", time_to_score_csv(rows))
    groups: dict[str, dict[str, list[Path]]] = {}
    for r in rows:
        groups.setdefault(r.task, {}).setdefault(r.config, []).append(r.run)
    plot_wallclock(groups, out / "curves_wallclock.png", resamples=resamples,
                   title=f"{out.name}: evaluation return against wall-clock minutes")
    return section


def aggregate_markdown(results: Sequence[RunResult], resamples: int) -> str:
    """IQM and mean of normalised final returns across dmc tasks, per preset (rliable), as markdown."""
    from benchtools.statistics import aggregate

    values: dict[str, dict[str, dict[int, float]]] = {}
    for r in results:
        values.setdefault(r.config, {}).setdefault(r.task, {})[r.seed] = r.final_return
    rows = aggregate(values, reps=resamples)
    if not rows:
        return ""
    ci = "95% stratified-bootstrap CI"
    lines = ["Across tasks: final return / 1000 on the dmc tasks (their maximum), IQM and mean over all "
             "(seed, task) scores, seeds resampled within each task (rliable); other tasks are left out.", "",
             f"| config | tasks | seeds per task | IQM {ci} | mean {ci} |", "|---|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.config} | {', '.join(row.tasks)} | {row.seeds_per_task} "
                     f"| {row.iqm.cell(3)} | {row.mean.cell(3)} |")
    return "\n".join(lines) + "\n"


def _preamble(out: Path, manifest: Manifest, this_command: str, unfinished: Sequence[str],
              resamples: int, eval_episodes: set[str], budgets: Sequence[int]) -> list[str]:
    lines = [f"Learning benchmark `{out}`; runs launched by:", ""]
    for entry in manifest.data["commands"]:
        lines.append(f"- `{entry['command']}` — {entry['time']}, commit `{entry['commit']}`, "
                     f"{entry['machine']}, --jobs {entry['jobs']}")
    if not manifest.data["commands"]:
        lines.append("- (no bench.json: runs not launched by this tool)")
    lines += ["", f"Table written {now_iso()} by `{this_command}`, commit `{_git_commit()}`.", ""]
    for entry in manifest.data["commands"][-1:]:
        for preset, template in entry.get("train_commands", {}).items():
            lines.append(f"- preset `{preset}`, each run: `{template}`")
    lines += [
        f"- final return: `return_mean` of the last evaluation ({' / '.join(sorted(eval_episodes))} "
        "episode(s), policy mean); AUC: trapezoid area under the evaluation curve over actor steps divided "
        "by its span (return units); IQM: interquartile mean over seeds (with 3 seeds it equals the mean); "
        f"CI: 95% percentile bootstrap over seeds through rliable ({resamples:,} resamples, seed 0; none "
        "below 3 seeds, and with few seeds it only shows how far the seeds agree).",
        "- env steps/s: environment steps over the run's own wall time at its last evaluation (its log's "
        "`wall_seconds`: start-up, compilation and evaluation included, a resumed run's pause not counted)"
        + (f"; min / 100k steps is extrapolated from runs of {min(budgets):,} steps."
           if min(budgets) < 100_000 else "."),
    ]
    if unfinished:
        lines.append(f"- not finished, left out: {', '.join(unfinished)}")
    return lines


def write_outputs(out: Path, results: Sequence[RunResult], unfinished: Sequence[str], manifest: Manifest,
                  resamples: int, this_command: str, time_section: str = "") -> None:
    from dmpo.utils.files import atomic_write_text

    summaries = summarise(results, resamples=resamples)
    write_results_csv(out / "results.csv", summaries)
    write_runs_csv(out / "runs.csv", results)
    groups: dict[str, dict[str, list[Path]]] = {}
    for result in results:
        groups.setdefault(result.task, {}).setdefault(result.config, []).append(result.run)
    budgets = sorted({r.budget for r in results})
    plot_benchmark(groups, out / "curves.png", resamples=resamples,
                   title=f"{out.name}: {' / '.join(f'{b:,}' for b in budgets)} env steps per run")
    episodes = set()
    for result in results:
        config = json.loads((result.run / "config.json").read_text(encoding="utf-8"))
        episodes.add(str(config["config"].get("eval_episodes", "?")))
    preamble = _preamble(out, manifest, this_command, unfinished, resamples, episodes, budgets)
    text = results_markdown(summaries, preamble=preamble)
    from benchtools.statistics import plot_performance_profile

    values: dict[str, dict[str, dict[int, float]]] = {}
    for r in results:
        values.setdefault(r.config, {}).setdefault(r.task, {})[r.seed] = r.final_return
    profile = plot_performance_profile(values, out / "performance_profile.png",
                                       title=f"{out.name}: final return / 1000 over dmc tasks and seeds")
    text = "\n".join(part for part in (text, aggregate_markdown(results, resamples), time_section) if part)
    atomic_write_text(out / "results.md", text)
    print(text)
    written = ["results.md", "results.csv", "runs.csv", "curves.png"] + (
        ["performance_profile.png"] if profile else [])
    print(f"wrote {', '.join(str(out / name) for name in written)}")


# --------------------------------------------------------------------------------------------- main


def _check_tasks(tasks: Sequence[str]) -> None:
    """Makes each task once, so that a misspelt one fails here rather than in every run."""
    from dmpo.envs import EnvError, make

    # dm_control probes GLFW on import and warns on headless machines even when nothing renders.
    warnings.filterwarnings("ignore", message=".*DISPLAY environment variable is missing")
    for task in tasks:
        try:
            make(task, seed=0).close()
        except EnvError as error:
            raise SystemExit(f"learning.py: error: --tasks: {error}") from error


def _summarise_folder(args: argparse.Namespace, manifest: Manifest, this_command: str) -> int:
    results, unfinished = collect(args.out, manifest, args)
    time_section = write_time_to_score(args.out, collect_times(args.out, args), args.resamples)
    if time_section:
        print(time_section)
        print(f"wrote {args.out / 'time_to_score.md'}, {args.out / 'time_to_score.csv'}, "
              f"{args.out / 'curves_wallclock.png'}")
    if not results:
        print(f"learning.py: no finished run under {args.out / 'runs'} matches"
              + (f" (unfinished: {', '.join(unfinished)})" if unfinished else ""), file=sys.stderr)
        return 0 if time_section else 1
    write_outputs(args.out, results, unfinished, manifest, args.resamples, this_command, time_section)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parse_args(argv)
    this_command = shlex.join([_shown(sys.executable), _shown(__file__), *argv])
    out: Path = args.out
    if args.summarise_only:
        if not (out / "runs").is_dir():
            raise SystemExit(f"learning.py: error: --out {out} holds no runs/ folder to summarise")
        return _summarise_folder(args, Manifest(out), this_command)
    for preset in args.preset:  # bad flags fail here, before any run starts
        what = f"--preset {preset}" + (" with the flags after `--`" if extra else "")
        check_train_flags(train_settings(args.tasks[0], 0, args, preset, extra), what)
    _check_tasks(args.tasks)
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(out)
    manifest.add_command({"time": now_iso(), "command": this_command, "commit": _git_commit(),
                          "machine": _machine(), "jobs": args.jobs, "tasks": args.tasks,
                          "presets": args.preset,
                          "sweeps": {p: shlex.join(["dmpo", *sweep_command(out, p, args, extra)[3:]])
                                     for p in args.preset},
                          "train_commands": {p: shlex.join(["dmpo", "train", *train_settings(
                              "TASK", "SEED", args, p, extra)]) for p in args.preset}})
    stopped, failed = run_sweeps(out, args, extra)
    if stopped:
        print(f"stopped; the same command continues the benchmark: {this_command}", file=sys.stderr)
        return stopped
    status = _summarise_folder(args, manifest, this_command)
    if failed:
        print(f"learning.py: the sweeps of preset(s) {', '.join(failed)} failed; their trials' output is "
              f"under {out / 'runs'}/<preset>/.logs", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
