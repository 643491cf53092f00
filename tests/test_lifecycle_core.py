"""The run lifecycle core on its own: the boundary schedule, the status machine, the resume rules.

No environment, no network, no Ray: these rules are shared by the single-process trainer and the
distributed program, and are checked here as plain functions of their inputs.
"""

from __future__ import annotations

import json

import pytest

from dmpo.config import DMPOConfig, TrainConfig
from dmpo.lifecycle.directory import RunDirectory
from dmpo.lifecycle.resume import ResumeError, apply_resume, plan_resume
from dmpo.lifecycle.schedule import BoundarySchedule, Due, RunSchedule
from dmpo.lifecycle.status import IllegalTransition, RunStatus, check_transition

# -------------------------------------------------------------------------------------------- schedule


def test_a_boundary_is_taken_at_the_first_check_at_or_past_it_and_only_once():
    schedule = BoundarySchedule(500)
    assert [schedule.due(steps) for steps in (100, 499, 500, 500, 750, 999, 1000)] == \
        [None, None, 500, None, None, None, 1000]


def test_boundaries_crossed_together_give_one_event_at_the_latest_and_are_not_replayed():
    schedule = BoundarySchedule(500)
    assert schedule.due(1700) == 1500  # 500, 1000 and 1500 crossed between two checks: one event
    assert schedule.due(1900) is None  # 500 and 1000 are not made up later
    assert schedule.due(2000) == 2000


def test_a_resumed_schedule_starts_after_its_checkpoint_and_zero_means_never():
    schedule = BoundarySchedule(500, start=1000)
    assert schedule.due(1000) is None and schedule.due(1499) is None and schedule.due(1500) == 1500
    never = BoundarySchedule(0)
    assert never.due(10**9) is None and never.next is None
    with pytest.raises(ValueError, match="period must be an integer >= 0"):
        BoundarySchedule(-1)


def test_events_are_labelled_with_the_steps_of_the_check_not_the_boundary():
    schedule = RunSchedule(total_steps=1500, eval_every=500, checkpoint_every=500)
    assert schedule.check(400) == Due()
    assert schedule.check(520) == Due(evaluation=520, checkpoint=520)
    assert not schedule.check(600)


def test_no_periodic_checkpoint_at_the_budget_so_a_finished_run_has_one_final_checkpoint():
    schedule = RunSchedule(total_steps=1500, eval_every=500, checkpoint_every=500)
    assert schedule.check(500) == Due(evaluation=500, checkpoint=500)
    schedule.evaluated(500)
    schedule.checkpointed(500)
    assert schedule.check(1000) == Due(evaluation=1000, checkpoint=1000)
    schedule.evaluated(1000)
    schedule.checkpointed(1000)
    assert schedule.check(1500) == Due(evaluation=1500)  # the budget: the final checkpoint follows
    schedule.evaluated(1500)
    assert schedule.final_events(1500) == Due(checkpoint=1500)  # evaluated there already: no second one


def test_final_events_add_what_the_last_boundary_did_not_cover():
    schedule = RunSchedule(total_steps=1200, eval_every=500, checkpoint_every=500)
    schedule.check(1000)
    schedule.evaluated(1000)
    schedule.checkpointed(1000)
    assert schedule.final_events(1200) == Due(evaluation=1200, checkpoint=1200)
    assert schedule.final_events(1200, stopped_early=True) == Due(checkpoint=1200)  # a callback's stop
    schedule.checkpointed(1200)
    assert schedule.final_events(1200, stopped_early=True) == Due()
    schedule.evaluated(1200)  # an evaluation changes what a checkpoint holds: one more final checkpoint
    assert schedule.final_events(1200) == Due(checkpoint=1200)


def test_a_video_boundary_crossed_after_the_last_check_films_the_final_evaluation():
    """The budget reached mid-episode: the boundary at 400 was never checked, the final round at 676
    is the next evaluation after it."""
    schedule = RunSchedule(total_steps=400, eval_every=250, video_every=400)
    assert schedule.check(300) == Due(evaluation=300)  # before the video boundary: not filmed
    schedule.evaluated(300)
    assert schedule.final_events(676) == Due(evaluation=676, checkpoint=676, video=676)
    filmed_at_check = RunSchedule(total_steps=400, eval_every=250, video_every=400)
    assert filmed_at_check.check(500) == Due(evaluation=500, video=500)
    filmed_at_check.evaluated(500)
    assert filmed_at_check.final_events(676) == Due(evaluation=676, checkpoint=676)  # filmed once only
    stopped = RunSchedule(total_steps=400, eval_every=250, video_every=400)
    assert stopped.final_events(676, stopped_early=True) == Due(checkpoint=676)  # no round: no video


def test_a_run_without_checkpoints_or_evaluations_schedules_none():
    schedule = RunSchedule(total_steps=1000, eval_every=0, checkpoint_every=100, checkpoints=False)
    assert not schedule.check(500)
    assert schedule.final_events(1000) == Due()


# ---------------------------------------------------------------------------------------------- status


@pytest.mark.parametrize("path", [
    ["starting", "running", "finished"], ["starting", "running", "interrupted"],
    ["starting", "running", "failed"], ["starting", "interrupted"], ["starting", "failed"]])
def test_allowed_lives_of_a_run(path):
    current = None
    for status in path:
        check_transition(current, status)
        current = status


@pytest.mark.parametrize(("current", "new"), [
    (None, "running"), ("starting", "finished"), ("running", "starting"), ("running", "running"),
    ("finished", "running"), ("failed", "finished"), ("interrupted", "finished"), ("finished", "failed")])
def test_illegal_transitions_are_refused_naming_both_statuses(current, new):
    with pytest.raises(IllegalTransition, match=f"from {current!r} to {new!r}"):
        check_transition(current, new)


def test_unknown_statuses_are_refused():
    with pytest.raises(ValueError, match="status must be one of"):
        check_transition("starting", "done")


def test_the_status_is_written_to_run_json_with_its_reason(tmp_path):
    run = RunDirectory.create(tmp_path / "run", TrainConfig(), seed=0)
    status = RunStatus(run)
    assert status.current == "starting" == run.info()["status"]
    status.running()
    with pytest.raises(IllegalTransition):
        status.running()
    status.failed("OSError: disk full")
    info = json.loads(run.info_path.read_text())
    assert (info["status"], info["status_reason"]) == ("failed", "OSError: disk full") and "end_time" in info
    with pytest.raises(IllegalTransition):
        status.finished()  # a failed run never turns finished
    status.restart()  # a resume
    assert run.info()["status"] == "starting" and run.info()["status_reason"] is None
    status.running()
    status.finished("reached --stop-at-return 100")
    assert RunStatus(RunDirectory.open(run.path)).current == "finished"


# ---------------------------------------------------------------------------------------------- resume


def _run(tmp_path, **fields) -> RunDirectory:
    return RunDirectory.create(tmp_path / "run", TrainConfig(steps=1000, **fields), seed=0)


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_step_zero_with_its_saved_config(tmp_path):
    run = _run(tmp_path, eval_every=100)
    run.set_status("interrupted")
    plan = plan_resume(run.path)
    assert plan.from_scratch and plan.checkpoint is None and plan.reached == 0 and not plan.nothing_to_do
    assert plan.config == TrainConfig(steps=1000, eval_every=100) and plan.changes == {}


def test_resumable_fields_may_change_and_are_recorded(tmp_path):
    run = _run(tmp_path)
    plan = plan_resume(run.path, TrainConfig(steps=5000, eval_every=300))
    assert plan.changes == {"steps": (1000, 5000), "eval_every": (10000, 300)}
    assert (plan.config.steps, plan.config.eval_every) == (5000, 300)
    apply_resume(plan)
    assert RunDirectory.open(run.path).load_config(TrainConfig).steps == 5000


def test_fields_that_shaped_the_checkpoint_are_refused_by_name(tmp_path):
    run = _run(tmp_path)
    given = TrainConfig(steps=1000, seed=3, agent=DMPOConfig(batch_size=7))
    with pytest.raises(ResumeError, match=r"cannot change on resume.*seed \(saved 0, given 3\).*"
                                          r"agent\.batch_size \(saved 128, given 7\)"):
        plan_resume(run.path, given)


def test_switching_between_one_process_and_distributed_is_refused(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(ResumeError, match=r"switch between single-process \(0\) and distributed"):
        plan_resume(run.path, TrainConfig(steps=1000, actors=2))


def test_a_config_without_checkpoints_or_a_folder_that_is_no_run_cannot_resume(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(ResumeError, match="DMPOConfig.checkpoint is False"):
        plan_resume(run.path, TrainConfig(steps=1000, agent=DMPOConfig(checkpoint=False)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResumeError, match="not a run directory"):
        plan_resume(tmp_path / "empty")
    with pytest.raises(ResumeError, match="no such run directory"):
        plan_resume(tmp_path / "missing")


def test_an_unusable_checkpoint_is_named_before_anything_is_built(tmp_path):
    run = _run(tmp_path)
    folder = run.checkpoints_dir / "step_000000000500"
    folder.mkdir()
    (folder / "state.json").write_text("{not json")
    with pytest.raises(ResumeError, match="step_000000000500"):
        plan_resume(run.path)
