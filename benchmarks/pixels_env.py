"""Speed of dmpo.envs environments: pixel env with fast vs dm_control's default render settings,
and state env steps/s (with and without the dmpo wrappers), measured in one run.

    MUJOCO_GL=egl .venv/bin/python benchmarks/pixels_env.py [--rounds 3] [--tasks cheetah-run ...]

Pixel rows use the full `make(..., pixels=True)` pipeline (84×84, 3 stacked frames, action repeat 2;
one rendered frame per control step, so frames/s = 2 × agent steps/s). The "default render" row
builds the same pipeline with `PixelObservationWrapper(fast=False)`, i.e. dm_control's own
`physics.render(84, 84, camera_id=0)` with the model's visual settings. Random uniform actions.
Timings on a shared machine are noisy: rows are measured in interleaved rounds and the best round
is kept; compare rows of one run, not runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import argparse  # noqa: E402
import time  # noqa: E402

import dm_env  # noqa: E402
import numpy as np  # noqa: E402

from dmpo.envs import control_suite, make, pixels, wrappers  # noqa: E402


def _default_render_pixel_env(task: str, seed: int) -> dm_env.Environment:
    environment = pixels.PixelObservationWrapper(control_suite.load(task, seed), image_size=84, fast=False)
    environment = pixels.FrameStackWrapper(environment, 3)
    environment = wrappers.CanonicalActionWrapper(environment)
    return wrappers.SinglePrecisionWrapper(wrappers.ActionRepeatWrapper(environment, 2))


def _steps_per_second(environment: dm_env.Environment, steps: int, seed: int = 0) -> float:
    spec = environment.action_spec()
    actions = np.random.default_rng(seed).uniform(spec.minimum, spec.maximum, (steps,) + spec.shape)
    actions = actions.astype(spec.dtype)
    environment.reset()
    environment.step(actions[0])  # warm-up (first render, first physics step)
    start = time.perf_counter()
    for action in actions:
        if environment.step(action).last():
            environment.reset()
    return steps / (time.perf_counter() - start)


def _variants(task: str, args: argparse.Namespace):
    """(label, environment, agent steps per round, frames per agent step) of one task."""
    return [
        ("pixels, fast render", make(f"dmc:{task}", pixels=True, seed=0), args.steps, 2),
        ("pixels, dm_control default render", _default_render_pixel_env(task, 0), args.default_steps, 2),
        ("states, dmpo pipeline", make(f"dmc:{task}", seed=0), args.state_steps, None),
        ("states, raw suite.load", control_suite.load(task, 0), args.state_steps, None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="agent steps per round, fast pixel env")
    parser.add_argument("--default-steps", type=int, default=30,
                        help="agent steps per round, pixel env with default render settings")
    parser.add_argument("--state-steps", type=int, default=2000, help="agent steps per round, state env")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds; the best round of each row is reported (less load noise)")
    parser.add_argument("--tasks", nargs="+", default=["cheetah-run", "walker-walk", "cartpole-swingup"])
    args = parser.parse_args()

    rows = []
    for task in args.tasks:
        variants = _variants(task, args)
        best = [0.0] * len(variants)
        for _ in range(args.rounds):
            for index, (_, environment, steps, _) in enumerate(variants):
                best[index] = max(best[index], _steps_per_second(environment, steps))
        for (label, _, _, frames_per_step), rate in zip(variants, best, strict=True):
            rows.append((task, label, rate, frames_per_step and frames_per_step * rate))

    print(f"MUJOCO_GL={os.environ['MUJOCO_GL']}, {os.cpu_count()} CPUs, "
          f"best of {args.rounds} interleaved rounds, load average {os.getloadavg()[0]:.1f}\n")
    print("| task | environment | agent steps/s | frames/s | ms per frame (physics included) |")
    print("|---|---|---:|---:|---:|")
    for task, label, rate, frames in rows:
        frame_text = f"{frames:.0f} | {1e3 / frames:.2f}" if frames else "– | –"
        print(f"| {task} | {label} | {rate:.0f} | {frame_text} |")
    print()
    for task in args.tasks:
        fast, default = (row[3] for row in rows if row[0] == task and row[1].startswith("pixels"))
        print(f"{task}: the fast render settings make the pixel env {fast / default:.1f}× faster")


if __name__ == "__main__":
    main()
