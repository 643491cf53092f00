"""The memory of Ray's GCS server during a distributed run, against a baseline commit, side by side.

Usage: .venv/bin/python benchmarks/gcs_memory.py OUT --baseline REV [--minutes 10] [--actors 4]
       [--env gym:Pendulum-v1] [--warmup 120]
       .venv/bin/python benchmarks/gcs_memory.py --summarise OUT/summary.json   (the table again)

Runs `dmpo train --actors N` twice at the same time, each on its own private Ray cluster: once with
this checkout's code and once with the code of commit REV (checked out into a temporary git worktree
and put first on PYTHONPATH; the same virtual environment, so the same Ray). Every 10 s it records the
RSS of each run's `gcs_server` process (`OUT/rss.csv`). After `--minutes` both runs are stopped with
SIGTERM (each writes its checkpoint; a run started in the background ignores SIGINT) and
`OUT/summary.json` gets, per run: the GCS server's RSS after `--warmup` seconds and at the end, its
growth in MiB per hour, and the env steps the run reached (its newest checkpoint's), so that the
growth can be read per step too. The table it prints is what docs/results/reliability.md shows.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_soak import processes_of  # noqa: E402  (a sibling script, not a package)

MIB = 2**20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--baseline", required=True, help="the commit to compare with")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds before growth is counted")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--env", default="gym:Pendulum-v1")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def gcs_rss(driver: psutil.Process) -> int | None:
    for name, process in processes_of([driver]).values():
        if name == "gcs_server":
            try:
                return process.memory_info().rss
            except psutil.Error:
                return None
    return None


def newest_steps(run: Path) -> int | None:
    steps = [int(path.parent.name.split("_")[1].split("-")[0])
             for path in (run / "checkpoints").glob("step_*/state.json")]
    return max(steps) if steps else None


def start(args: argparse.Namespace, name: str, source: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(source / "src"), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "dmpo.cli", "train", "--actors", str(args.actors), "--env", args.env,
               "--steps", str(10**8), "--seed", str(args.seed), "--no-progress",
               "--run-dir", str(args.out / name / "run")]
    log = open(args.out / name / "output.log", "w")  # noqa: SIM115 - the child writes it until stopped
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=args.out / name)


def summarise(rows: list[dict[str, Any]], name: str, warmup: float) -> dict[str, Any]:
    mine = [row for row in rows if row["run"] == name and row["gcs_rss_mib"] is not None]
    settled = [row for row in mine if row["seconds"] >= warmup]
    if len(settled) < 2:
        return {"samples": len(mine)}
    first, last = settled[0], settled[-1]
    hours = (last["seconds"] - first["seconds"]) / 3600
    return {"samples": len(mine), "rss_after_warmup_mib": first["gcs_rss_mib"],
            "rss_at_end_mib": last["gcs_rss_mib"], "peak_mib": max(row["gcs_rss_mib"] for row in mine),
            "growth_mib_per_hour": round((last["gcs_rss_mib"] - first["gcs_rss_mib"]) / hours, 1)}


def table(result: dict[str, Any]) -> str:
    lines = ["| code | GCS RSS after warm-up (MiB) | at the end (MiB) | growth (MiB/hour) | env steps |",
             "|---|---:|---:|---:|---:|"]
    for name in ("baseline", "current"):
        run = result["runs"][name]
        lines.append(f"| {run['label']} | {run.get('rss_after_warmup_mib', '-')} | "
                     f"{run.get('rss_at_end_mib', '-')} | {run.get('growth_mib_per_hour', '-')} | "
                     f"{run.get('env_steps') or '-'} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--summarise"]:
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    args = parse_args()
    if args.warmup >= args.minutes * 60:
        raise SystemExit(f"--warmup ({args.warmup:g} s) must be shorter than --minutes ({args.minutes:g})")
    baseline = subprocess.run(["git", "rev-parse", args.baseline], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    current = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
    for name in ("baseline", "current"):
        (args.out / name).mkdir(parents=True, exist_ok=True)
    worktree = Path(tempfile.mkdtemp(prefix="dmpo-baseline-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(worktree), baseline], cwd=ROOT, check=True,
                   capture_output=True)
    runs = {"baseline": start(args, "baseline", worktree), "current": start(args, "current", ROOT)}
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    try:
        while (elapsed := time.monotonic() - began) < args.minutes * 60:
            for name, process in runs.items():
                if process.poll() is not None:
                    raise SystemExit(f"the {name} run ended early (exit {process.returncode}); see "
                                     f"{args.out / name / 'output.log'}")
                rss = gcs_rss(psutil.Process(process.pid))
                rows.append({"seconds": round(elapsed, 1), "run": name,
                             "gcs_rss_mib": None if rss is None else round(rss / MIB, 1)})
            time.sleep(10.0)
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in runs.values():
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, capture_output=True)
    with open(args.out / "rss.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["seconds", "run", "gcs_rss_mib"])
        writer.writeheader()
        writer.writerows(rows)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": os.uname().nodename,
        "cpus": os.cpu_count(), "load_at_end": os.getloadavg(),
        "command": " ".join("$OUT" if arg == str(args.out) else arg for arg in sys.argv),
        "minutes": args.minutes, "warmup_seconds": args.warmup, "actors": args.actors, "env": args.env,
        "runs": {
            "baseline": {"label": f"baseline {baseline[:7]}", "commit": baseline,
                         **summarise(rows, "baseline", args.warmup),
                         "env_steps": newest_steps(args.out / "baseline" / "run")},
            "current": {"label": f"current {current[:7]}", "commit": current,
                        **summarise(rows, "current", args.warmup),
                        "env_steps": newest_steps(args.out / "current" / "run")}}}
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
