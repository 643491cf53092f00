"""A distributed run under chaos: every kind of node killed on a seeded schedule, one machine lost.

Usage: .venv/bin/python benchmarks/chaos_soak.py OUT [--minutes 60] [--env gym:Pendulum-v1]
       [--actors 4] [--seed 0] [--period 180] [--chaos-seed 20261206] [--undisturbed-seeds 0 1 2]
       .venv/bin/python benchmarks/chaos_soak.py --summarise OUT/summary.json   (the table again)

Starts a two-node Ray cluster on this machine (tests/two_node_cluster.py: a head node with the
`head` resource, a worker node with `worker`, every socket on 127.0.0.1, token authentication) and
runs `dmpo train --ray-address ... --actors N` on it: the learner and the replay node on the head,
the actors and the evaluator on the worker, the counter with the driver. The run's budget (`--steps`)
is what it trains; `--minutes` is how long the chaos lasts at most. Every `--period` seconds (times
drawn uniformly from 0.5-1.5 periods, seeded by `--chaos-seed`) a node chosen at random (learner,
replay node, counter, an actor, the evaluator) is killed with SIGKILL; the fault nearest the middle
of the schedule takes the whole worker node away instead, and a new worker joins 30 s later.

Measured, into OUT: each fault (`faults.csv`: time, kind, pid, whether the run's line for it came
and when), the RSS of every process of the run every 10 s (`rss.csv`, and `rss.png`; the undisturbed
runs' gcs_server in `rss-undisturbed.csv`), every
checkpoint the run wrote, verified when it appeared (`checkpoints.csv`: its checksums and whether
it loads), and `summary.json`: faults injected and survived, env steps redone (run.json's
"recoveries"), checkpoints verified, each long-lived process's RSS growth after warm-up, and the
final evaluation next to undisturbed runs of the same budget (`--undisturbed-seeds`, each on its own
private cluster, run alongside the soak so that every run shares the machine alike). The
table it prints is what docs/results/reliability.md shows.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

import soak_report as report
from soak_report import growth_at_faults, plot_rss, process_growth, rss_growth, table

ROOT = Path(__file__).resolve().parents[1]
HOLDER = ROOT / "tests" / "two_node_cluster.py"
# Each kind of fault (soak_report.KINDS, in the table's order) and the Ray class of its node.
KINDS = dict(zip(report.KINDS, ("LearnerNode", "ReplayService", "CounterService", "ActorNode",
                                "EvaluatorNode"), strict=True))
# The driver's line for each kind of fault (a recovery, or a replacement of an acting node).
ANSWERS = {"learner": "the learner node was lost", "replay": "the replay node was lost",
           "counter": "the counter node was lost", "actor": "a new one takes its place",
           "evaluator": "the evaluator failed", "worker-node": "a new one takes its place"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--env", default="gym:Pendulum-v1")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--period", type=float, default=180.0)
    parser.add_argument("--chaos-seed", type=int, default=20261206)
    parser.add_argument("--undisturbed-seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--checkpoint-every", type=int, default=5000)
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="further `dmpo train` flags for every run (after --)")
    return parser.parse_args()


def chaos_schedule(rng: random.Random, minutes: float, period: float) -> list[tuple[float, str]]:
    """(seconds after the first checkpoint, kind) of each fault; the middle one takes the worker away."""
    times, now = [], 0.0
    while True:
        now += rng.uniform(0.5, 1.5) * period
        if now > minutes * 60:
            break
        times.append(now)
    kinds = [rng.choice(sorted(KINDS)) for _ in times]
    if kinds:
        kinds[len(kinds) // 2] = "worker-node"
    return list(zip(times, kinds, strict=True))


class Lines:
    """The driver's output, kept with the time each line arrived."""

    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.lines: list[tuple[float, str]] = []
        self._log = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed by `close`
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in iter(process.stdout.readline, ""):
            self.lines.append((time.monotonic(), line))
            self._log.write(line)
            self._log.flush()

    def after(self, moment: float, text: str) -> float | None:
        """When the first line holding `text` arrived after `moment` (None: not yet)."""
        return next((t for t, line in list(self.lines) if t >= moment and text in line), None)

    def close(self) -> None:
        self._thread.join(timeout=60)
        self._log.close()


def processes_of(roots: list[psutil.Process]) -> dict[int, tuple[str, psutil.Process]]:
    """Every process under `roots`, by pid, with a short name (`ray::LearnerNode`, `raylet`, ...)."""
    found: dict[int, tuple[str, psutil.Process]] = {}
    for root in roots:
        try:
            family = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for process in family:
            try:
                command = process.cmdline()
                # Ray titles a worker by its class and the method it runs now (`ray::ActorNode.run`).
                ray_worker = command and command[0].startswith("ray::")
                name = command[0].split(".")[0] if ray_worker else process.name()
                found[process.pid] = ("dmpo driver" if process.pid == roots[-1].pid else name, process)
            except psutil.Error:
                continue
    return found


def node_process(roots: list[psutil.Process], title: str) -> psutil.Process | None:
    for name, process in processes_of(roots).values():
        if name == f"ray::{title}":
            return process
    return None


def verify(folder: Path) -> dict[str, Any]:
    """A checkpoint folder as a resume reads it: its state, the learner file's checksums, its load."""
    from dmpo.lifecycle.checkpoints import read_state
    from dmpo.utils.checkpointing import find_checkpoint_file, verify_checkpoint_file

    row: dict[str, Any] = {"checkpoint": folder.name}
    try:
        row["env_steps"] = read_state(folder).env_steps
        verify_checkpoint_file(find_checkpoint_file(folder / "learner"))
        row["verified"] = True
    except Exception as error:  # noqa: BLE001 - recorded, the table counts it
        row["verified"], row["error"] = False, f"{type(error).__name__}: {error}"
    return row


def train_command(args: argparse.Namespace, run: Path, seed: int) -> list[str]:
    return [sys.executable, "-m", "dmpo.cli", "train", "--actors", str(args.actors), "--env", args.env,
            "--steps", str(args.steps), "--seed", str(seed), "--run-dir", str(run), "--no-progress",
            "--checkpoint-every", str(args.checkpoint_every), *args.extra]


class Watch:
    """What the soak does and records each second: checkpoints verified as they appear, RSS every 10 s,
    the chaos schedule's faults (counted from the first checkpoint: a learner that has trained)."""

    def __init__(self, run: Path, roots: list[psutil.Process], schedule: list[tuple[float, str]],
                 tell: Any, started: float, others: list[psutil.Process]) -> None:
        self.run, self.roots, self.schedule, self.tell, self.started = run, roots, schedule, tell, started
        self.others = others  # the undisturbed runs' drivers: their own clusters' gcs_server
        self.faults: list[dict[str, Any]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.rss: list[list[Any]] = []
        self.others_rss: list[list[Any]] = []
        self._next_sample, self._origin, self._worker_back = 0.0, None, None

    def second(self, now: float) -> None:
        folder = self.run / "checkpoints"
        for checkpoint in sorted(folder.glob("step_*")) if folder.is_dir() else ():
            if checkpoint.name not in self.checkpoints and (checkpoint / "state.json").is_file():
                seen = round(now - self.started, 1)
                self.checkpoints[checkpoint.name] = {"seconds": seen, **verify(checkpoint)}
        if self._origin is None and self.checkpoints:
            self._origin = now
        if now >= self._next_sample:
            self._next_sample = now + 10.0
            for pid, (name, process) in processes_of(self.roots).items():
                try:
                    rss = process.memory_info().rss / 2**20
                    self.rss.append([round(now - self.started, 1), name, pid, rss])
                except psutil.Error:
                    continue
            for other in self.others:
                for pid, (name, process) in processes_of([other]).items():
                    try:
                        if name == "gcs_server":
                            rss = process.memory_info().rss / 2**20
                            self.others_rss.append([round(now - self.started, 1), name, pid, rss])
                    except psutil.Error:
                        continue
        if self._worker_back is not None and now >= self._worker_back:
            self.tell("add-worker")
            self._worker_back = None
        if self._origin is not None and self.schedule and now - self._origin >= self.schedule[0][0]:
            at, kind = self.schedule.pop(0)
            if not self.inject(now, kind):  # no such process now (its machine is away): a little later
                self.schedule.insert(0, (at + 5.0, kind))

    def inject(self, now: float, kind: str) -> bool:
        fault: dict[str, Any] = {"seconds": round(now - self.started, 1), "kind": kind, "at": now}
        if kind == "worker-node":  # a machine lost: its actors and evaluator go with it
            self.tell("kill-worker")
            self._worker_back, fault["pid"] = now + 30.0, "worker node"
        elif (victim := node_process(self.roots, KINDS[kind])) is not None:
            victim.kill()
            fault["pid"] = victim.pid
        else:
            return False
        self.faults.append(fault)
        print(f"[{fault['seconds']:7.1f} s] fault {len(self.faults)}: {kind} ({fault['pid']})", flush=True)
        return True

    def answered(self, lines: Lines) -> None:
        """Each fault's answer: seconds until the run's line for it (None: none before the next fault)."""
        for number, fault in enumerate(self.faults):
            until = self.faults[number + 1]["at"] if number + 1 < len(self.faults) else float("inf")
            answer = lines.after(fault["at"], ANSWERS[fault["kind"]])
            late = answer is None or answer > until
            fault["answered_after"] = None if late else round(answer - fault["at"], 1)
        for fault in self.faults:
            del fault["at"]


def soak(args: argparse.Namespace, others: list[psutil.Process]) -> dict[str, Any]:
    out = args.out
    token_env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                 "PYTHONUNBUFFERED": "1", "JAX_PLATFORMS": "cpu"}
    token_env.pop("RAY_AUTH_TOKEN_PATH", None)
    driver_env = {**token_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    ray_dir = tempfile.mkdtemp(prefix="dmpo-soak-", dir="/tmp")
    holder = subprocess.Popen([sys.executable, str(HOLDER), ray_dir], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=token_env)
    address = ""
    while not address:
        line = holder.stdout.readline()
        if not line:
            raise RuntimeError("the two-node cluster did not start")
        address = line.split(" ", 1)[1].strip() if line.startswith("ADDRESS ") else ""
    holder_lines = Lines(holder, out / "cluster.log")

    def tell(command: str) -> None:
        holder.stdin.write(command + "\n")
        holder.stdin.flush()

    run = out / "soak"
    command = [*train_command(args, run, args.seed), "--ray-address", address,
               "--actor-resources", '{"worker": 0.5}', "--learner-resources", '{"head": 1}',
               "--replay-resources", '{"head": 1}', "--max-node-restarts", "1000"]
    (out / "command.txt").write_text(" ".join(command) + "\n")
    started = time.monotonic()
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=driver_env)
    lines = Lines(driver, out / "soak.log")
    watch = Watch(run, [psutil.Process(holder.pid), psutil.Process(driver.pid)],
                  chaos_schedule(random.Random(args.chaos_seed), args.minutes, args.period), tell, started,
                  others)
    try:
        while driver.poll() is None:
            watch.second(time.monotonic())
            time.sleep(1.0)
        wall = time.monotonic() - started
    finally:
        if driver.poll() is None:
            driver.kill()
        lines.close()
        tell("stop")
        holder.wait(timeout=120)
        holder_lines.close()
        shutil.rmtree(ray_dir, ignore_errors=True)
    watch.answered(lines)
    for folder in sorted((run / "checkpoints").glob("step_*")):  # written in the last second
        watch.checkpoints.setdefault(folder.name, {"seconds": round(wall, 1), **verify(folder)})
    info = json.loads((run / "run.json").read_text())
    return {"exit": driver.returncode, "wall_seconds": round(wall, 1), "status": info["status"],
            "recoveries": info.get("recoveries", []), "faults": watch.faults,
            "checkpoints": list(watch.checkpoints.values()), "rss": watch.rss, "final": final_evaluation(run),
            "evaluations": evaluations(run), "command": command, "undisturbed_rss": watch.others_rss}


def evaluations(run: Path) -> list[list[float]]:
    """[env steps, mean return] of every evaluation row the run logged."""
    path = run / "logs" / "evaluator" / "logs.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [[int(float(row["actor_steps"])), float(row["return_mean"])] for row in csv.DictReader(handle)]


def final_evaluation(run: Path) -> dict[str, Any] | None:
    rows = evaluations(run)
    return {"env_steps": rows[-1][0], "return_mean": rows[-1][1]} if rows else None


def start_undisturbed(args: argparse.Namespace) -> list[tuple[int, subprocess.Popen]]:
    """The undisturbed runs, started with the soak (each on its own private cluster): all share the
    machine over the same hour, so none has it to itself while the soak runs."""
    started = []
    for seed in args.undisturbed_seeds:
        log = open(args.out / f"undisturbed-{seed}.log", "w", encoding="utf-8")  # noqa: SIM115 - the child's
        process = subprocess.Popen(train_command(args, args.out / f"undisturbed-{seed}", seed), stdout=log,
                                   stderr=subprocess.STDOUT)
        started.append((seed, process))
    return started


def undisturbed(args: argparse.Namespace, runs: list[tuple[int, subprocess.Popen]]) -> list[dict[str, Any]]:
    from datetime import datetime

    results = []
    for seed, process in runs:
        process.wait()
        run = args.out / f"undisturbed-{seed}"
        info = json.loads((run / "run.json").read_text())
        wall = (datetime.fromisoformat(info["end_time"]) - datetime.fromisoformat(info["start_time"]))
        results.append({"seed": seed, "exit": process.returncode, "status": info["status"],
                        "wall_seconds": wall.total_seconds(), "final": final_evaluation(run),
                        "evaluations": evaluations(run)})
        print(f"undisturbed seed {seed}: {results[-1]}", flush=True)
    return results


def main() -> None:
    if sys.argv[1:2] == ["--summarise"]:
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    alongside = start_undisturbed(args)
    result = soak(args, [psutil.Process(process.pid) for _, process in alongside])
    rows, others = result.pop("rss"), result.pop("undisturbed_rss")
    for name, table_rows in (("rss.csv", rows), ("rss-undisturbed.csv", others)):
        with open(args.out / name, "w", newline="") as handle:
            csv.writer(handle).writerows([["seconds", "process", "pid", "rss_mib"], *table_rows])
    plot_rss(rows, result["faults"], args.out / "rss.png")
    first_checkpoint = min((c["seconds"] for c in result["checkpoints"]), default=0.0)
    result["rss_growth_after_warmup"] = rss_growth(rows, warmup=first_checkpoint + 120) if rows else {}
    last_fault = max((f["seconds"] for f in result["faults"]), default=0.0)
    result["process_growth"] = process_growth(rows, last_fault) if rows else {}
    result["gcs_at_faults"] = growth_at_faults(rows, result["faults"])
    # The undisturbed runs' own gcs_server, each over its life: what the GCS does without faults.
    result["undisturbed_gcs"] = (process_growth(others, last_fault).get("gcs_server") or {}).get("life")
    result["undisturbed"] = undisturbed(args, alongside)
    result.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
                  machine=f"{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f}",
                  args={k: str(v) for k, v in vars(args).items()})
    (args.out / "summary.json").write_text(json.dumps(result, indent=1))
    print(table(result))


if __name__ == "__main__":
    main()
