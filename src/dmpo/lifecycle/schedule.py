"""When a run evaluates and checkpoints: environment-step boundaries, one rule for both modes.

`TrainConfig.eval_every`, `checkpoint_every` and `video_every` are periods in environment steps.
The run checks the schedule at its check points (an episode end: in one process every episode end,
distributed the episode ends of the acting nodes) with the shared environment-step count. At each
check the latest boundary that is due, if any, is taken once: the event runs with the policy of that
moment and is labelled with the environment steps of that check (the steps it evaluated), not with
the boundary. Boundaries crossed together (a long episode, several actors) give one event, and a
boundary is never replayed later: a crossed boundary whose check was missed is not made up at the
end of the run.

Videos (`video_every`): a video boundary films the run's next evaluation, the first of the very
episodes it scores (`Due.video` is set on the check, or the final events, whose evaluation is filmed).
A video boundary crossed after the last check (the budget reached mid-episode) still films the final
evaluation: it is the next one. Both modes film the same evaluations, at the same environment steps.

At the end of a run (`final_events`): one final evaluation unless the last one already evaluated
these very steps, and one final checkpoint unless the last one already holds them. A periodic
checkpoint is never taken at or past the step budget, because the final checkpoint follows at once:
a finished run ends with one final checkpoint, not two copies of it.
"""

from __future__ import annotations

import dataclasses

__all__ = ["BoundarySchedule", "Due", "RunSchedule", "next_boundary"]


def next_boundary(steps: int, every: int) -> int:
    """The first multiple of `every` above `steps`."""
    return (steps // every + 1) * every


class BoundarySchedule:
    """The boundaries of one periodic event: multiples of `every` environment steps (0: never).

    `start`: the environment steps the run (or a resumed run) begins at; boundaries at or below it
    are behind it.
    """

    def __init__(self, every: int, start: int = 0) -> None:
        if not isinstance(every, int) or every < 0:
            raise ValueError(f"a boundary period must be an integer >= 0 environment steps, got {every!r}")
        if not isinstance(start, int) or start < 0:
            raise ValueError(f"start must be an integer >= 0 environment steps, got {start!r}")
        self.every = every
        self.next: int | None = next_boundary(start, every) if every else None

    def due(self, env_steps: int) -> int | None:
        """The latest boundary at or below `env_steps` not taken yet, taken now; None if none is due."""
        if self.next is None or env_steps < self.next:
            return None
        latest = env_steps // self.every * self.every
        self.next = latest + self.every
        return latest


@dataclasses.dataclass(frozen=True)
class Due:
    """What one check asks for; each field is the environment steps to label the event with, or None.
    `video` is set only together with `evaluation`: that evaluation is filmed."""

    evaluation: int | None = None
    checkpoint: int | None = None
    video: int | None = None

    def __bool__(self) -> bool:
        return any(value is not None for value in (self.evaluation, self.checkpoint, self.video))


class RunSchedule:
    """Evaluations, checkpoints and videos of one run (see the module docstring).

    Args:
      total_steps: the run's budget (`TrainConfig.steps`).
      eval_every / checkpoint_every / video_every: periods in environment steps (0: never).
      start: the environment steps the run begins at (a resumed run: its checkpoint's).
      checkpoints: False when the run writes no checkpoint at all (`DMPOConfig.checkpoint`).
    """

    def __init__(self, *, total_steps: int, eval_every: int = 0, checkpoint_every: int = 0,
                 video_every: int = 0, start: int = 0, checkpoints: bool = True) -> None:
        self.total_steps = total_steps
        self.checkpoints_on = checkpoints
        self.evaluations = BoundarySchedule(eval_every, start)
        self.checkpoints = BoundarySchedule(checkpoint_every if checkpoints else 0, start)
        self.videos = BoundarySchedule(video_every, start)
        self.last_evaluation: int | None = None  # env steps of the last evaluation (this process's)
        self.last_checkpoint: int | None = start if start else None
        self.video_pending = False
        """A video boundary passed since the last evaluation: the next evaluation is filmed."""

    @classmethod
    def of(cls, config: object, start: int = 0) -> RunSchedule:
        """The schedule of a `TrainConfig`."""
        return cls(total_steps=config.steps, eval_every=config.eval_every,  # type: ignore[attr-defined]
                   checkpoint_every=config.checkpoint_every,  # type: ignore[attr-defined]
                   video_every=config.video_every, start=start,  # type: ignore[attr-defined]
                   checkpoints=config.agent.checkpoint)  # type: ignore[attr-defined]

    def check(self, env_steps: int) -> Due:
        """One check at `env_steps`: takes the latest due boundary of each event."""
        evaluation = env_steps if self.evaluations.due(env_steps) is not None else None
        checkpoint = env_steps if self.checkpoints.due(env_steps) is not None else None
        if checkpoint is not None and env_steps >= self.total_steps:
            checkpoint = None  # the final checkpoint follows at once (final_events)
        if self.videos.due(env_steps) is not None:
            self.video_pending = True
        return Due(evaluation=evaluation, checkpoint=checkpoint, video=self._filmed(evaluation))

    def _filmed(self, evaluation: int | None) -> int | None:
        """The video label of an evaluation at `evaluation` steps: filmed when a video boundary is pending."""
        if evaluation is None or not self.video_pending:
            return None
        self.video_pending = False
        return evaluation

    def evaluated(self, env_steps: int) -> None:
        """Records an evaluation of the policy at `env_steps`."""
        self.last_evaluation = env_steps
        self.last_checkpoint = None  # the evaluation counts moved on since the last checkpoint

    def checkpointed(self, env_steps: int | None) -> None:
        """Records a checkpoint holding `env_steps` (None: the state changed since the last one)."""
        self.last_checkpoint = env_steps

    def take_video_state(self, pending: bool, next_boundary: int | None) -> None:
        """Takes over the video boundaries another copy of this schedule checked (distributed: the
        counter node's, which the acting nodes' episode ends advance): whether one passed since its
        last evaluation, and the next one not crossed yet."""
        self.video_pending, self.videos.next = pending, next_boundary

    def final_events(self, env_steps: int, *, stopped_early: bool = False) -> Due:
        """What the end of a run writes: the final evaluation (none after a callback's stop, which
        ends the run as it is) and the final checkpoint, each unless the last one was at these steps."""
        if self.videos.due(env_steps) is not None:  # crossed since the last check: the final one films it
            self.video_pending = True
        evaluation = (env_steps if self.evaluations.every and not stopped_early
                      and self.last_evaluation != env_steps else None)
        checkpoint = env_steps if self.checkpoints_on and self.last_checkpoint != env_steps else None
        return Due(evaluation=evaluation, checkpoint=checkpoint, video=self._filmed(evaluation))
