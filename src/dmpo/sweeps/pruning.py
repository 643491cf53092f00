"""The search's pruning rules: Ray Tune's ASHA and median stopping, recording which trials they stop.

A trial a rule stops is a *pruned* trial: its `dmpo train` is interrupted (checkpoint written) and it is
not continued. The rules run in the sweep's own process; each stop appends the trial's run directory to
`OUT/pruned.txt`, which the results table reads (Tune's own records do not say why a trial ended).
"""

from __future__ import annotations

from pathlib import Path

from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule, TrialScheduler

__all__ = ["PruningASHA", "PruningMedian", "make_scheduler", "pruned_runs"]

_RECORD = "pruned.txt"


class _Recording:
    record: Path

    def on_trial_result(self, tune_controller, trial, result):
        action = super().on_trial_result(tune_controller, trial, result)
        if action == TrialScheduler.STOP and not result.get("done") and result.get("run_dir"):
            with open(self.record, "a", encoding="utf-8") as file:
                file.write(result["run_dir"] + "\n")
        return action


class PruningASHA(_Recording, ASHAScheduler):
    """Asynchronous successive halving on the evaluation return, by env steps."""


class PruningMedian(_Recording, MedianStoppingRule):
    """Stops a trial whose best return falls below the median of the others' at the same env steps."""


def make_scheduler(name: str, out: Path, steps: int, eval_every: int):
    """The rule `--scheduler NAME` names (None: no pruning). Rungs start at the first evaluation; the
    budget's end is past the last one, so that no rule stops a trial about to finish."""
    if name == "asha":
        scheduler = PruningASHA(time_attr="env_steps", max_t=steps + 1, grace_period=eval_every,
                                reduction_factor=2)
    elif name == "median":
        scheduler = PruningMedian(time_attr="env_steps", grace_period=eval_every, min_samples_required=2)
    else:
        return None
    scheduler.record = out / _RECORD
    return scheduler


def pruned_runs(out: Path) -> set[str]:
    path = out / _RECORD
    return set(path.read_text(encoding="utf-8").split()) if path.is_file() else set()
