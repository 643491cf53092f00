"""One sweep trial: an ordinary `dmpo train` run directory, driven by a Ray Tune trainable.

The trainable starts `python -m dmpo.cli train` as a child process on the node Tune placed it on and
reports each row of the run's evaluator log (`logs/evaluator/logs.csv`) to Tune as one result, so that
Tune's schedulers can stop a trial that falls behind. What the child does depends on its folder:

* `run.json` says "finished": nothing runs; its evaluations are reported again (the folder is only read);
* a checkpoint exists: `dmpo train --resume` continues it;
* a folder without a checkpoint (killed before its first one): it is renamed `<folder>.incomplete-<k>`
  (kept, never deleted) and the trial starts again;
* no folder: `dmpo train ... --run-dir <folder>` starts it.

Stopping a trial (a scheduler's decision, Ctrl-C on the sweep, a lost node) sends SIGINT to the child,
which writes a checkpoint and exits; the child also gets SIGINT when its parent worker dies, so a killed
worker never leaves it running. A child that exits with an error fails the trial, and Tune's restart
(`max_failures`) calls `setup` again, which resumes from the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ray import tune

from dmpo.sweeps.results import evaluation_rows, run_status

__all__ = ["SweepTrial", "set_aside", "trial_action"]

_STOP_WAIT_S = 600.0  # a child given SIGINT writes a checkpoint (replay included) before it exits
_PR_SET_PDEATHSIG = 1


def _has_checkpoint(run: Path) -> bool:
    return any((run / "checkpoints").glob("step_*/state.json"))


def trial_action(run: Path) -> str:
    """ "finished", "resume", "restart" (a folder with nothing to resume from) or "start" (no folder)."""
    if not run.exists():
        return "start"
    if run_status(run) == "finished":
        return "finished"
    return "resume" if _has_checkpoint(run) else "restart"


def set_aside(run: Path) -> Path:
    """Renames an unusable run folder to `<folder>.incomplete-<k>`; nothing in it is deleted."""
    for k in range(1, 10_000):
        target = run.with_name(f"{run.name}.incomplete-{k}")
        if not target.exists():
            run.rename(target)
            return target
    raise FileExistsError(f"no free name to set {run} aside")


def _child_signals() -> None:
    """In the child, before exec: SIGINT stops it (checkpoint, then exit), also when the worker that
    started it dies. Ray's workers ignore SIGINT, and an ignored (or blocked) signal stays so across exec."""
    import ctypes

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


def _wait_until_free(run: Path) -> None:
    """A restarted trial (its node lost) may find its previous `dmpo train` still writing the checkpoint it
    was interrupted at: wait for the run's lock rather than fail on it."""
    from dmpo.lifecycle.lock import is_mine_or_free

    deadline = time.monotonic() + _STOP_WAIT_S
    while not is_mine_or_free(run) and time.monotonic() < deadline:
        time.sleep(0.5)


def metrics(row: dict[str, str], run: Path) -> dict[str, Any]:
    def number(name: str) -> float | None:
        with contextlib.suppress(TypeError, ValueError):
            return float(row[name])
        return None

    steps = number("actor_steps")
    return {
        "return": number("return_mean"),
        "env_steps": int(steps) if steps is not None else None,
        "wall_seconds": number("wall_seconds"),
        "run_dir": str(run),
    }


def sampled_value(value: object) -> str:
    """A value Optuna sampled, as a `dmpo train` flag value."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _write_point_flags(folder: Path, flags: list[str]) -> None:
    """`<point>/flags.json`: the grid point's (or the sampled) flags, for the results table; written once."""

    from dmpo.utils.files import atomic_write_text
    from dmpo.utils.formats import SWEEP_POINT

    path = folder / "flags.json"
    text = json.dumps({**SWEEP_POINT.header(), "flags": flags}) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


class SweepTrial(tune.Trainable):
    """A Tune trainable. Its config: `common` (the sweep's `out`, `train_flags`, `ray_address`,
    `distributed`, and for a search the sampled `keys` and the `seed`), then either `trial` (a grid
    trial's `point`, `point_flags` and `seed`) or the sampled values under their keys."""

    def setup(self, config: dict[str, Any]) -> None:
        common = config["common"]
        out = Path(common["out"])
        if "trial" in config:
            point, point_flags, seed = (config["trial"][k] for k in ("point", "point_flags", "seed"))
        else:  # a searched trial: its own folder, named by Tune's trial id (kept when the sweep resumes)
            point, seed = f"trial-{self.trial_id}", common["seed"]
            point_flags = [t for key in common["keys"] for t in (f"--{key}", sampled_value(config[key]))]
        self.run = out / point / f"seed-{seed}"
        self.log = out / ".logs" / f"{point}__seed-{seed}.log"
        self.reported = 0
        self.process: subprocess.Popen | None = None
        _write_point_flags(self.run.parent, point_flags)
        _wait_until_free(self.run)
        action = trial_action(self.run)
        if action == "finished":
            return
        command = [sys.executable, "-m", "dmpo.cli", "train"]
        if action == "resume":
            command += ["--resume", str(self.run), "--no-progress"]
        else:
            if action == "restart":
                set_aside(self.run)
            command += [
                *common["train_flags"],
                *point_flags,
                "--seed",
                str(seed),
                "--run-dir",
                str(self.run),
                "--no-progress",
            ]
        if common.get("distributed") and common.get("ray_address"):
            command += ["--ray-address", common["ray_address"]]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as output:
            output.write(f"=== {action}: {' '.join(command)}\n")
            output.flush()
            # Its own session: a Ctrl-C at the terminal reaches the sweep, which stops each trial itself.
            self.process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_child_signals,
            )

    def step(self) -> dict[str, Any]:
        while True:
            rows = evaluation_rows(self.run)
            code = None if self.process is None else self.process.poll()
            ended = self.process is None or code is not None
            if code not in (None, 0):
                raise RuntimeError(
                    f"`dmpo train` for {self.run} exited with {code}; its output is in {self.log}"
                )
            if len(rows) > self.reported:
                row = rows[self.reported]
                self.reported += 1
                done = ended and self.reported >= len(evaluation_rows(self.run))
                return {**metrics(row, self.run), "done": done}
            if ended:
                if not rows:
                    raise RuntimeError(f"{self.run} finished without an evaluation (give --eval-every)")
                return {**metrics(rows[-1], self.run), "done": True}
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=1.0)  # the next evaluation row, or the child's exit

    def cleanup(self) -> None:
        """Stops the child resumably: SIGINT, then its checkpoint is waited for."""
        if self.process is None or self.process.poll() is not None:
            return
        with open(self.log, "a", encoding="utf-8") as output:
            output.write("=== stopping: SIGINT (a checkpoint is written first)\n")
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        return {}  # the run directory holds the trial's checkpoints; `setup` resumes from them

    def load_checkpoint(self, checkpoint: dict) -> None:
        pass
