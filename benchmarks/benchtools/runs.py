"""Launching a learning benchmark: one `dmpo train` process per (preset, task, seed), resumable.

Layout of a benchmark folder `out`::

    runs/<preset>/<task>/seed-<S>/          a `dmpo train` run folder; `:` in the task is `-`
    output/<preset>__<task>__seed-<S>.log   that process's stdout and stderr
    bench.json                              the launching commands; per run, each process's wall time

A run is identified by the `dmpo train` flags that define it (its *settings*: task, seed, budget,
evaluation, preset and extra flags), which its run.json records. `plan_action` decides what to do with
each planned run: skip it when finished, resume it from its newest checkpoint, set an unusable folder
aside (renamed, never deleted) and start again, or refuse a folder made with other settings. The figures
read from finished runs are in `benchtools.results`; the command line is `benchmarks/learning.py`.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchtools.results import read_run
from dmpo.lifecycle.directory import atomic_write_json

__all__ = ["Manifest", "PlannedRun", "exclusive", "find_runs", "now_iso", "plan_action", "run_all",
           "set_aside", "task_folder"]

_INTERRUPT_WAIT_S = 600  # a run given SIGINT writes a checkpoint (replay included) before it exits


@dataclass(frozen=True)
class PlannedRun:
    preset: str
    task: str
    seed: int
    settings: tuple[str, ...]
    """`dmpo train` flags that define the run (all but the run folder and the progress line)."""
    out: Path

    @property
    def key(self) -> str:
        return f"{self.preset}/{task_folder(self.task)}/seed-{self.seed}"

    @property
    def path(self) -> Path:
        return self.out / "runs" / self.key

    @property
    def log(self) -> Path:
        return self.out / "output" / f"{self.key.replace('/', '__')}.log"


def task_folder(task: str) -> str:
    return task.replace(":", "-").replace("/", "_")


def now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------- bench.json


class Manifest:
    """bench.json: the launching commands and, per run key, each `dmpo train` process it ran."""

    def __init__(self, out: Path) -> None:
        self.path = out / "bench.json"
        self.data = {"commands": [], "runs": {}}
        if self.path.is_file():
            with open(self.path, encoding="utf-8") as f:
                self.data = json.load(f)

    def save(self) -> None:
        atomic_write_json(self.path, self.data)

    def add_command(self, entry: dict) -> None:
        self.data["commands"].append(entry)
        self.save()

    def add_attempt(self, key: str, attempt: dict) -> None:
        self.data["runs"].setdefault(key, {"attempts": []})["attempts"].append(attempt)
        self.save()

    def move(self, key: str, new_key: str) -> None:
        if key in self.data["runs"]:
            self.data["runs"][new_key] = self.data["runs"].pop(key)
            self.save()

    def wall_seconds(self, key: str) -> float | None:
        attempts = self.data["runs"].get(key, {}).get("attempts", [])
        return sum(a["seconds"] for a in attempts) if attempts else None


# ------------------------------------------------------------------------------------------ planning


def _has_checkpoint(run: Path) -> bool:
    return any((run / "checkpoints").glob("step_*/state.json"))


def _recorded_settings(run: Path) -> tuple[str, ...] | None:
    """The defining flags of the `dmpo train` command saved in a run's run.json (None if not a train one)."""
    command = json.loads((run / "run.json").read_text(encoding="utf-8")).get("command", [])
    if len(command) < 2 or command[1] != "train":
        return None
    flags, rest = [], iter(command[2:])
    for flag in rest:
        if flag == "--run-dir":
            next(rest, None)
        elif flag not in ("--no-progress", "--progress") and not flag.startswith("--run-dir="):
            flags.append(flag)
    return tuple(flags)


def plan_action(run: PlannedRun) -> str:
    """"skip" (finished), "resume" (checkpoint), "restart" (folder without one) or "start" (no folder).

    Raises ValueError when the folder holds a run made with other settings."""
    if not run.path.exists():
        return "start"
    if not (run.path / "run.json").is_file():
        return "restart"
    recorded = _recorded_settings(run.path)
    if recorded != run.settings:
        raise ValueError(f"{run.path} was made by `dmpo train {shlex.join(recorded or ('?',))}`, not by "
                         f"`dmpo train {shlex.join(run.settings)}`")
    status = json.loads((run.path / "run.json").read_text(encoding="utf-8")).get("status")
    if status == "finished":
        return "skip"
    return "resume" if _has_checkpoint(run.path) else "restart"


def set_aside(run: PlannedRun, manifest: Manifest) -> Path:
    """Renames an unusable run folder to `<folder>.incomplete-<k>`; nothing in it is deleted."""
    for k in range(1, 10_000):
        target = run.path.with_name(f"{run.path.name}.incomplete-{k}")
        if not target.exists():
            run.path.rename(target)
            manifest.move(run.key, f"{run.key}.incomplete-{k}")
            return target
    raise FileExistsError(f"no free name to set {run.path} aside")


# ------------------------------------------------------------------------------------------- running


def _command(run: PlannedRun, action: str) -> list[str]:
    base = [sys.executable, "-m", "dmpo.cli", "train"]
    if action == "resume":
        return [*base, "--resume", str(run.path), "--no-progress"]
    return [*base, *run.settings, "--run-dir", str(run.path), "--no-progress"]


def _report_finish(run: PlannedRun, code: int, seconds: float) -> str:
    if code != 0:
        return f"FAILED (exit {code}) after {seconds / 60:.1f} min; see {run.log}"
    try:
        result = read_run(run.path, run.preset)
    except (OSError, ValueError) as error:
        return f"finished in {seconds / 60:.1f} min, but its logs cannot be read: {error}"
    return (f"finished in {seconds / 60:.1f} min, {result.env_steps} env steps, "
            f"last evaluation return {result.final_return:.1f}")


def run_all(todo: Sequence[tuple[PlannedRun, str]], jobs: int, manifest: Manifest) -> list[PlannedRun]:
    """Runs the planned `dmpo train` processes, `jobs` at a time; returns the runs that failed.

    Children run in their own session, so a Ctrl-C reaches only this process, which passes one SIGINT
    to each running child (it writes a checkpoint and exits) and waits for them before exiting."""
    pending, running, failed = list(todo), {}, []
    total = len(todo)
    try:
        while pending or running:
            while pending and len(running) < jobs:
                run, action = pending.pop(0)
                if action == "restart":
                    aside = set_aside(run, manifest)
                    print(f"  {run.key}: no checkpoint to resume from; set aside as {aside}")
                command = _command(run, "resume" if action == "resume" else "start")
                run.log.parent.mkdir(parents=True, exist_ok=True)
                log = open(run.log, "a", encoding="utf-8")  # noqa: SIM115 - closed when the process ends
                log.write(f"=== {now_iso()} {shlex.join(command)}\n")
                log.flush()
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
                running[process] = (run, action, time.monotonic(), now_iso(), log)
                print(f"[{total - len(pending)}/{total}] {action} {run.key} -> {run.path}", flush=True)
            for process in [p for p in running if p.poll() is not None]:
                run, action, started, start_time, log = running.pop(process)
                seconds = time.monotonic() - started
                log.close()
                manifest.add_attempt(run.key, {"action": action, "start_time": start_time, "seconds": seconds,
                                               "returncode": process.returncode, "jobs": jobs})
                print(f"  {run.key}: {_report_finish(run, process.returncode, seconds)}", flush=True)
                if process.returncode != 0:
                    failed.append(run)
            time.sleep(0.5)
    except KeyboardInterrupt:
        print(f"interrupted: stopping {len(running)} run(s) (each writes a checkpoint first)", flush=True)
        for process in running:
            process.send_signal(signal.SIGINT)
        for process, (run, action, started, start_time, log) in running.items():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=_INTERRUPT_WAIT_S)
            manifest.add_attempt(run.key, {"action": action, "start_time": start_time,
                                           "seconds": time.monotonic() - started,
                                           "returncode": process.returncode, "jobs": jobs})
            log.close()
        raise
    return failed


def find_runs(out: Path) -> list[tuple[str, Path]]:
    """(preset, folder) of every run folder under `out/runs` (folders set aside excluded)."""
    return [(path.parent.parent.name, path) for path in sorted((out / "runs").glob("*/*/seed-*"))
            if path.is_dir() and ".incomplete-" not in path.name]


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
    with open(out / ".bench.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"error: another benchmark holds {out / '.bench.lock'}; "
                             "one launcher per folder at a time") from None
        yield


def raise_interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler that stops the launcher as a Ctrl-C would (children get SIGINT, then exit)."""
    raise KeyboardInterrupt


