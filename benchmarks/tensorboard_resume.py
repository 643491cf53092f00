"""Does TensorBoard still show a step twice after a resume with a purge marker?

A killed run logged steps 0..10, its checkpoint was at step 6, the resumed run logs 7..12. Each case
prints what TensorBoard's EventAccumulator (what the TensorBoard UI draws) and, if installed, tbparse
(a reader that ignores purge markers) list. Needs `tensorboard` (dev extra); tbparse is optional.

    .venv/bin/python benchmarks/tensorboard_resume.py bench/tensorboard-resume

The folder (default bench/tensorboard-resume) must be new or empty: the script writes one subfolder per case.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboardX import SummaryWriter

from dmpo.reporting.rewind import event_file_suffix

try:
    from tbparse import SummaryReader
except ImportError:
    SummaryReader = None


def write(logdir: Path, steps, value: float, purge: int | None = None, suffix: str | None = None) -> None:
    writer = SummaryWriter(logdir=str(logdir), purge_step=purge,
                           filename_suffix=suffix if suffix is not None else event_file_suffix())
    for step in steps:
        writer.add_scalar("x", value, global_step=step)
    writer.close()


def show(logdir: Path, name: str) -> None:
    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    points = [(event.step, event.value) for event in accumulator.Scalars("x")]
    twice = len(points) != len({step for step, _ in points})
    print(f"{name}: EventAccumulator {len(points)} points, a step twice: {twice}: {points}")
    if SummaryReader is not None:
        frame = SummaryReader(str(logdir)).scalars
        listed = list(zip(frame.step.tolist(), frame.value.tolist(), strict=True))
        print(f"    tbparse {len(listed)} points: {listed}")


def random_suffix() -> str:
    return "." + uuid.uuid4().hex[:8]


def parse_arguments(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=Path("bench/tensorboard-resume"),
                        help="a new or empty folder for the cases' event files (default: %(default)s)")
    root = parser.parse_args(argv).folder
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        parser.error(f"{root} exists and is not an empty folder: name a new one")
    return root


def main(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    case = root / "no_purge"
    write(case, range(11), 1.0)
    time.sleep(1.1)
    write(case, range(7, 13), 2.0)
    show(case, "no purge_step")
    case = root / "writer_purge"  # the resumed writer itself has purge_step=7
    write(case, range(11), 1.0)
    time.sleep(1.1)
    write(case, range(7, 13), 2.0, purge=7)
    show(case, "resumed writer with purge_step")
    case = root / "marker"  # what dmpo does: a marker file (SummaryWriter(purge_step), closed), a new writer
    write(case, range(11), 1.0)
    time.sleep(1.1)
    write(case, [], 0.0, purge=7)
    write(case, range(7, 13), 2.0)
    show(case, "marker file, then a new writer")
    for trial in range(3):  # tensorboardX names files by the second: within one, the suffix orders them
        case = root / f"same_second_random_suffix_{trial}"
        write(case, range(11), 1.0, suffix=random_suffix())
        write(case, [], 0.0, purge=7, suffix=random_suffix())
        write(case, range(7, 13), 2.0, suffix=random_suffix())
        show(case, f"same second, random suffixes #{trial}")
    case = root / "same_second_ordered_suffix"
    write(case, range(11), 1.0)
    write(case, [], 0.0, purge=7)
    write(case, range(7, 13), 2.0)
    show(case, "same second, dmpo's time-ordered suffixes")


if __name__ == "__main__":
    main(parse_arguments(sys.argv[1:]))
