"""Time to score of dmpo against its peers (Acme's TF DMPO, SBX's SAC and TQC), one run at a time.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/side_by_side.py --task dmc:cartpole-swingup \\
        --seeds 0 --threshold 800 --max-steps 500000 --max-minutes 60 --out bench/side-by-side \\
        --runs dmpo dmpo-overlap dmpo-actors1 dmpo-actors2 sac tqc acme [-- extra dmpo flags]
    ... benchmarks/side_by_side.py --out bench/side-by-side --summarise-only
    ... benchmarks/side_by_side.py --summarise benchmarks/recorded/side-by-side/walker-walk-b128.json

Every (run kind, seed) runs alone, one after another, as a subprocess in its own process group under
`nice -n 10`. Each is timed the same way: wall-clock since its launch at which each result line (Acme,
SAC, TQC: stdout) or log row (dmpo: the CSV logs, polled every second) was first seen. Two metrics, each as
(env steps, minutes) when first reached (`benchtools.side_by_side_metrics`):

    (a) evaluation return ≥ threshold: dmpo's evaluator, SAC's and TQC's evaluation lines; Acme has no
        evaluator.
    (b) 10-episode moving mean of training-episode returns ≥ threshold: dmpo's and Acme's training
        episodes; SAC and TQC print none.

A run is stopped (SIGINT, then SIGTERM and SIGKILL of its group) once every metric it has is reached, or
at --max-minutes; --max-steps is its own training budget. A capped run gives a lower bound ("> X min").
Acme's peer script builds cartpole-swingup; on other tasks it runs through `acme_task.py`, which sets the
script's task and changes nothing else (the reference launcher's networks are the same on every task).

--out gets results.json (every run, every timestamped line; written after each run, so the same command
again continues the batch, skipping runs already there) and results.md (the tables, with the date,
commit, machine, load and commands on top).

The peers' paths: --acme-python/--acme-script and --sac-python/--sac-script, or the environment variables
DMPO_BENCH_ACME_PYTHON, DMPO_BENCH_ACME_SCRIPT, DMPO_BENCH_SAC_PYTHON and DMPO_BENCH_SAC_SCRIPT. TQC runs
from the SAC peer's environment and script (`--algo tqc`, at its own defaults).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchtools.side_by_side_metrics import (
    MOVING_MEAN_EPISODES,
    all_reached,
    env_steps_per_second,
    results_markdown,
)
from dmpo.sweeps.results import DEFAULT_THRESHOLDS

RUN_KINDS = ("dmpo", "dmpo-overlap", "dmpo-actors1", "dmpo-actors2", "sac", "tqc", "acme")
# The SBX algorithms, run by one peer script (`--algo`) from one environment: the SAC peer's.
SBX_KINDS = ("sac", "tqc")
DMPO_KIND_FLAGS = {"dmpo": [], "dmpo-overlap": ["--overlap-learner"], "dmpo-actors1": ["--actors", "1"],
                   "dmpo-actors2": ["--actors", "2"]}
ACME_TASK = "dmc:cartpole-swingup"  # the task the Acme peer script builds by itself
ACME_TASK_WRAPPER = Path(__file__).resolve().parent / "acme_task.py"
POLL_SECONDS = 1.0
STOP_GRACE_SECONDS = 40.0  # dmpo --actors waits up to 20 s for its nodes; leave it room to finish
REPO = Path(__file__).resolve().parent.parent
# The peers run from environments of their own, outside this repository: each path comes from its flag
# or, without it, from an environment variable. There is no default path.
# Each flag: its environment variable, what it names, and the run kinds that need it.
PEER_FLAGS = (
    ("--acme-python", "DMPO_BENCH_ACME_PYTHON", "the Python of Acme's TF DMPO environment", ("acme",)),
    ("--acme-script", "DMPO_BENCH_ACME_SCRIPT", "the Acme peer script (its `train` command)", ("acme",)),
    ("--sac-python", "DMPO_BENCH_SAC_PYTHON", "the Python of the SBX environment (SAC, TQC)", SBX_KINDS),
    ("--sac-script", "DMPO_BENCH_SAC_SCRIPT", "the SBX peer script (SAC, TQC)", SBX_KINDS),
)
# bench.py train's episode line: episode, cumulative env steps, return, steps/s, its own wall seconds.
ACME_EPISODE_LINE = re.compile(
    r"episode\s+(\d+)\s+env_steps\s+(\d+)\s+return\s+(\S+)\s+steps/s\s+\S+\s+wall\s+(\S+)")


def _now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def machine_description() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def run_command(kind: str, seed: int, args: argparse.Namespace, run_dir: Path) -> tuple[list[str], dict]:
    """The command line (under nice) and the extra environment of one run."""
    eval_every = min(args.eval_every, args.max_steps)
    if kind in DMPO_KIND_FLAGS:
        command = [sys.executable, "-m", "dmpo.cli", "train", "--env", args.task, "--seed", str(seed),
                   "--steps", str(args.max_steps), "--eval-every", str(eval_every), "--run-dir", str(run_dir),
                   "--no-progress", *DMPO_KIND_FLAGS[kind], *args.dmpo_flags]
        extra_env = {}
    elif kind in SBX_KINDS:
        command = [args.sac_python, args.sac_script, args.task.split(":", 1)[1], "--algo", kind,
                   "--steps", str(args.max_steps), "--seed", str(seed), "--eval-every", str(eval_every)]
        extra_env = {"MUJOCO_GL": "egl"}
    else:
        script = ([args.acme_script] if args.task == ACME_TASK
                  else [str(ACME_TASK_WRAPPER), args.acme_script, args.task.split(":", 1)[1]])
        command = [args.acme_python, *script, "train", "--steps", str(args.max_steps), "--seed", str(seed)]
        extra_env = {}
    return ["nice", "-n", "10", *command], extra_env


class LineReader:
    """Reads a subprocess's stdout on a thread, stamping each line with the seconds since launch."""

    def __init__(self, stream, launched: float, echo):
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream, launched, echo), daemon=True)
        self._thread.start()

    def _read(self, stream, launched: float, echo) -> None:
        for line in stream:
            self.lines.append((time.monotonic() - launched, line.rstrip("\n")))
            echo.write(line)
            echo.flush()

    def join(self) -> None:
        self._thread.join(timeout=10)


class CsvTail:
    """The complete rows of a growing CSV file, each stamped when first seen (a partial last line waits)."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: list[tuple[float, dict[str, str]]] = []

    def poll(self, seconds: float) -> None:
        try:
            text = self.path.read_text()
        except OSError:
            return
        complete = text[:text.rfind("\n") + 1]
        rows = list(csv.DictReader(io.StringIO(complete)))
        self.rows.extend((seconds, row) for row in rows[len(self.rows):])


def parse_sac(lines: list[tuple[float, str]]) -> dict:
    evaluations = []
    for seconds, line in lines:
        if line.startswith("{") and '"eval_return"' in line:
            data = json.loads(line)
            evaluations.append({"env_steps": int(data["env_steps"]), "return": float(data["eval_return"]),
                                "seconds": seconds, "own_train_seconds": data.get("train_seconds")})
    return {"evaluations": evaluations, "episodes": None}


def parse_acme(lines: list[tuple[float, str]]) -> dict:
    episodes = []
    for seconds, line in lines:
        match = ACME_EPISODE_LINE.search(line)
        if match:
            episodes.append({"env_steps": int(match[2]), "return": float(match[3]), "seconds": seconds,
                             "own_wall_seconds": float(match[4])})
    return {"evaluations": None, "episodes": episodes}


def parse_dmpo(evaluator: CsvTail, episodes: CsvTail) -> dict:
    # A distributed actor logs at most one episode row every 10 s, so with --actors some episodes may have
    # no row: the moving mean then runs over the logged ones, and the record says how many it missed.
    counted = max((int(float(row.get("actor_episodes") or 0)) for _, row in episodes.rows), default=0)
    return {
        "episodes_without_row": max(counted - len(episodes.rows), 0),
        "evaluations": [{"env_steps": int(float(row["actor_steps"])), "return": float(row["return_mean"]),
                         "seconds": seconds, "own_wall_seconds": float(row["wall_seconds"])}
                        for seconds, row in evaluator.rows],
        "episodes": [{"env_steps": int(float(row["actor_steps"])), "return": float(row["episode_return"]),
                      "seconds": seconds} for seconds, row in episodes.rows],
    }


def stop_group(process: subprocess.Popen) -> None:
    """SIGINT to the run's main process, then SIGTERM and SIGKILL to its whole group if it lingers.

    The interrupt goes to the main process alone: dmpo finishes its snapshot on it and, with --actors,
    stops its Ray nodes itself, which an interrupt landing on every worker at once would get in the way of.
    """
    stops = ((signal.SIGINT, False, STOP_GRACE_SECONDS), (signal.SIGTERM, True, 10.0),
             (signal.SIGKILL, True, 10.0))
    for sig, whole_group, wait in stops:
        try:
            if whole_group:
                os.killpg(process.pid, sig)
            else:
                os.kill(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def clear_group(process: subprocess.Popen) -> None:
    """Ends what is left of an exited run's process group, so nothing of it runs alongside the next run."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_one(kind: str, seed: int, args: argparse.Namespace) -> dict:
    record = {"kind": kind, "seed": seed, "task": args.task, "threshold": args.threshold,
              "mean_episodes": args.mean_episodes,
              "max_steps": args.max_steps, "max_minutes": args.max_minutes}
    run_dir = args.out / "runs" / kind / f"seed-{seed}"
    if run_dir.exists():
        # Left by an interrupted batch: dmpo would resume it, which would not be a run from scratch.
        kept = 1
        while run_dir.with_name(f"seed-{seed}.incomplete-{kept}").exists():
            kept += 1
        run_dir.rename(run_dir.with_name(f"seed-{seed}.incomplete-{kept}"))
    command, extra_env = run_command(kind, seed, args, run_dir)
    log_path = args.out / "logs" / f"{kind}-seed-{seed}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    record.update(command=shlex.join(command), env=extra_env, started=_now_utc(),
                  load_start=os.getloadavg()[0], log=str(log_path))
    print(f"[side_by_side] {kind} seed {seed}: {record['command']}", flush=True)
    launched = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               bufsize=1, env={**os.environ, **extra_env}, start_new_session=True)
    with log_path.open("w") as log:
        reader = LineReader(process.stdout, launched, log)
        evaluator = CsvTail(run_dir / "logs" / "evaluator" / "logs.csv")
        episodes = CsvTail(run_dir / "logs" / "environment_loop" / "logs.csv")

        def observed() -> dict:
            if kind in DMPO_KIND_FLAGS:
                seconds = time.monotonic() - launched
                evaluator.poll(seconds)
                episodes.poll(seconds)
                return parse_dmpo(evaluator, episodes)
            return (parse_sac if kind in SBX_KINDS else parse_acme)(list(reader.lines))

        status = None
        try:
            while process.poll() is None:
                time.sleep(POLL_SECONDS)
                record.update(observed())
                if all_reached(record):
                    status = "reached"
                elif time.monotonic() - launched > args.max_minutes * 60:
                    status = "cap: max minutes"
                if status:
                    stop_group(process)
                    break
        except KeyboardInterrupt:
            # The run has a session of its own, so a Ctrl-C here does not reach it: pass it on.
            stop_group(process)
            raise
        process.wait()
        clear_group(process)
        reader.join()
        # Rows and lines written while the run finished (last evaluation, final episode), seen at its exit.
        record.update(observed())
    seconds = time.monotonic() - launched
    if status is None:
        if all_reached(record):
            status = "reached"
        elif process.returncode == 0:
            status = "cap: max steps"
        else:
            status = f"failed (exit {process.returncode})"
    steps_seen = [p["env_steps"] for key in ("evaluations", "episodes") for p in (record.get(key) or [])]
    record.update(status=status, returncode=process.returncode, seconds=seconds,
                  env_steps=max(steps_seen, default=0), load_end=os.getloadavg()[0], ended=_now_utc(),
                  env_steps_per_s=env_steps_per_second(record),
                  output_tail=[line for _, line in reader.lines[-20:]])
    print(f"[side_by_side] {kind} seed {seed}: {status} after {seconds / 60:.1f} min", flush=True)
    return record


def write_summary(out: Path, results: dict) -> None:
    (out / "results.md").write_text(summary_markdown(results))


def summary_markdown(results: dict) -> str:
    """results.md's text: the date, commit, machine and commands, then the tables."""
    preamble = [
        f"# Time to score, side by side: {results['task']}, threshold {results['threshold']:g}",
        "",
        f"- date: {results['updated']}",
        f"- commit: {results['commit']}",
        f"- machine: {results['machine']}",
        f"- caps per run: {results['max_steps']:,} env steps, {results['max_minutes']:g} min",
        f"- (b) averages the last {results.get('mean_episodes', MOVING_MEAN_EPISODES)} training episodes",
        "- times: wall-clock since each run's launch, when its line or log row was first seen",
        "", "Commands:", "",
    ] + [f"- {r['kind']} seed {r['seed']}: `{r.get('command', r['status'])}`" for r in results["runs"]]
    return results_markdown(results["runs"], preamble=preamble)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    dmpo_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default=ACME_TASK)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threshold", type=float, default=None,
                        help="return to reach (default: the task's DEFAULT_THRESHOLDS entry, "
                             "dmpo.sweeps.results)")
    parser.add_argument("--mean-episodes", type=int, default=MOVING_MEAN_EPISODES,
                        help="training episodes in the moving mean of metric (b) (fewer only for smoke runs)")
    parser.add_argument("--max-steps", type=int, default=500_000)
    parser.add_argument("--max-minutes", type=float, default=60.0)
    parser.add_argument("--eval-every", type=int, default=10_000, help="dmpo, SAC and TQC evaluation period")
    parser.add_argument("--out", type=Path, help="the batch's folder (results.json, results.md, runs/)")
    parser.add_argument("--runs", nargs="+", choices=RUN_KINDS, default=list(RUN_KINDS))
    parser.add_argument("--summarise-only", action="store_true",
                        help="rewrite OUT/results.md from OUT/results.json; run nothing")
    parser.add_argument("--summarise", type=Path, nargs="+", metavar="RESULTS_JSON",
                        help="print the tables of these results.json files (e.g. benchmarks/recorded/"
                             "side-by-side/*.json); run and write nothing")
    for flag, variable, what, _ in PEER_FLAGS:
        parser.add_argument(flag, default=os.environ.get(variable),
                            help=f"{what} (default: ${variable}); needed by the runs it names")
    args = parser.parse_args(argv)
    if not (args.summarise_only or args.summarise):
        for flag, variable, what, kinds in PEER_FLAGS:
            for kind in (k for k in kinds if k in args.runs):
                if not getattr(args, flag[2:].replace("-", "_")):
                    parser.error(f"--runs {kind} needs {flag} or ${variable}: {what}")
    args.dmpo_flags = dmpo_flags
    if args.summarise:
        return args
    if args.out is None:
        parser.error("--out is required (or --summarise FILE to print recorded tables)")
    if not args.summarise_only and not args.task.startswith("dmc:"):
        parser.error("the peers run dm_control tasks only: --task dmc:<domain>-<task>")
    if args.threshold is None and not args.summarise_only:
        if args.task not in DEFAULT_THRESHOLDS:
            parser.error(f"no default threshold for {args.task}: give --threshold")
        args.threshold = DEFAULT_THRESHOLDS[args.task]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    if args.summarise:
        for path in args.summarise:
            print(summary_markdown(json.loads(path.read_text())))
        return
    results_path = args.out / "results.json"
    if args.summarise_only:
        write_summary(args.out, json.loads(results_path.read_text()))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    results = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}
    if results["runs"] and (results["task"], results["threshold"]) != (args.task, args.threshold):
        sys.exit(f"{results_path} holds {results['task']} at threshold {results['threshold']}: "
                 "use another --out")
    results.update(task=args.task, threshold=args.threshold, mean_episodes=args.mean_episodes,
                   max_steps=args.max_steps,
                   max_minutes=args.max_minutes, machine=machine_description(), commit=git_commit(),
                   dmpo_flags=args.dmpo_flags,
                   script=shlex.join([sys.executable, *sys.argv]))
    # A failed run (a crash, not a cap) is run again, and so is one an older script could not run;
    # every other recorded run is kept as it is.
    results["runs"] = [r for r in results["runs"] if not r["status"].startswith(("failed", "unsupported"))]
    done = {(r["kind"], r["seed"]) for r in results["runs"]}
    for seed in args.seeds:
        for kind in args.runs:
            if (kind, seed) in done:
                print(f"[side_by_side] {kind} seed {seed}: already in {results_path}, skipped", flush=True)
                continue
            results["runs"].append(run_one(kind, seed, args))
            results["updated"] = _now_utc()
            results_path.write_text(json.dumps(results, indent=1))
            write_summary(args.out, results)
    results["updated"] = _now_utc()
    results_path.write_text(json.dumps(results, indent=1))
    write_summary(args.out, results)
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
