"""The distributed stop against a scheduler's grace period, with stand-in nodes (no Ray cluster): the
learner's final checkpoint is asked for first, every wait shares one deadline, and a slow periodic
checkpoint delays the next one instead of failing the run. Real runs stopped by signals are in
tests/test_signals.py."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

pytest.importorskip("ray")

from dmpo.config import TrainConfig  # noqa: E402
from dmpo.run.distributed import acting_nodes as acting_nodes_module  # noqa: E402
from dmpo.run.distributed import program as program_module  # noqa: E402
from dmpo.run.distributed.acting_nodes import ActingNodes  # noqa: E402
from dmpo.run.distributed.evaluations import EvaluationRounds  # noqa: E402
from dmpo.run.distributed.options import ProgramOptions  # noqa: E402
from dmpo.run.distributed.program import DistributedProgram  # noqa: E402


class Clock:
    """Time that passes only when the stop waits (each wait on a silent node lasts its timeout)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wait(self, timeout: float) -> None:
        self.waits.append(timeout)
        self.now += timeout


class Node:
    """A node whose every call is recorded in `calls` and never answered."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self._name, self._calls = name, calls

    def __getattr__(self, method: str) -> types.SimpleNamespace:
        def remote(*args: object, **kwargs: object) -> str:
            self._calls.append(f"{self._name}.{method}")
            return f"{self._name}.{method}-ref"

        return types.SimpleNamespace(remote=remote)


class Events:
    stop_requested = False
    stop_reason = None
    last_evaluation = None

    def finish(self, *args: object) -> None:
        pass


def silent_program(monkeypatch, tmp_path: Path, actors: int) -> tuple[DistributedProgram, list[str], Clock]:
    clock, calls = Clock(), []

    def get_quietly(ref: object, timeout: float) -> None:
        if ref is not None:
            clock.wait(timeout)

    def ray_get(ref: object, timeout: float) -> None:
        clock.wait(timeout)
        raise program_module.ray.exceptions.GetTimeoutError("silent")

    for module in (program_module, acting_nodes_module):
        monkeypatch.setattr(module, "get_quietly", get_quietly)
        monkeypatch.setattr(module, "kill", lambda handle: None)
    monkeypatch.setattr(program_module, "time", clock)
    monkeypatch.setattr(program_module.ray, "get", ray_get)
    config, options = TrainConfig(actors=actors), ProgramOptions(stop_timeout_seconds=20.0)
    evaluator = Node("evaluator", calls)
    rounds = EvaluationRounds(on_row=lambda index, row: None, held=lambda: False)
    rounds.evaluator, rounds.rows = evaluator, types.SimpleNamespace(drain=clock.wait)
    nodes = ActingNodes(config, options, seed=0, on_evaluator=rounds.attach, check_critical=lambda: None)
    nodes.actor_handles = [Node(f"actor{i}", calls) for i in range(actors)]
    nodes._actor_refs = [f"actor{i}.run-ref" for i in range(actors)]
    nodes.evaluator, nodes._evaluator_ref = evaluator, "evaluator.run-ref"
    program = DistributedProgram.__new__(DistributedProgram)
    program.__dict__.update(
        config=config, options=options, run_dir=tmp_path, nodes=nodes, rounds=rounds,
        learner=Node("learner", calls), counter=Node("counter", calls), replay=Node("replay", calls),
        _learner_ref="learner.run-ref", _learner_result=None, _save_ref=None, _snapshot_ref=None,
        run=types.SimpleNamespace(snapshot_metadata=lambda **counts: {}),
        events=Events(), counts={}, evaluation_rows=[], replay_history=[], _started_at=None,
        _due_ref=None, episode_returns=[])
    return program, calls, clock


def test_the_final_checkpoint_starts_first_and_one_deadline_bounds_the_stop(monkeypatch, tmp_path):
    program, calls, clock = silent_program(monkeypatch, tmp_path, actors=8)
    result = program.stop("interrupted")
    assert calls[0] == "learner.stop"  # before any actor or the evaluator is told anything
    assert {f"actor{i}.stop" for i in range(8)} <= set(calls) and "evaluator.finish" in calls
    # No node answers: eight actors, the evaluator and the learner still cost one deadline, not one each.
    assert sum(clock.waits) <= 20.0
    assert clock.waits[0] == 20.0  # the whole deadline went to the final checkpoint, waited for first
    assert result.stop_reason.startswith(
        "the final checkpoint was not written within the stop timeout (20 s)"), result.stop_reason


def test_a_slow_periodic_checkpoint_delays_the_next_instead_of_failing_the_learner(monkeypatch, tmp_path):
    program, calls, _ = silent_program(monkeypatch, tmp_path, actors=1)
    program.__dict__.update(_checkpoint_wanted=False, _last_save_time=0.0, _next_checkpoint=None,
                            _next_eval=None)
    ready: list[str] = []
    monkeypatch.setattr(program_module.ray, "wait",
                        lambda refs, timeout: ([ref for ref in refs if ref in ready], []))
    monkeypatch.setattr(program_module.ray, "get", lambda ref: "checkpoints/step_1000")
    program.request_checkpoint()
    assert calls == ["learner.save"]
    program.request_checkpoint()  # the boundary after it, while the first is still being written
    assert calls == ["learner.save"] and program._checkpoint_wanted
    ready.append("learner.save-ref")  # written, however long it took
    program._schedule()  # (it also asks the counter service for the boundaries due)
    learner_calls = [call for call in calls if call.startswith("learner.")]
    assert learner_calls == ["learner.save", "learner.save"] and not program._checkpoint_wanted


def test_a_finished_run_waits_past_the_stop_deadline_for_the_rounds_it_sent(monkeypatch, tmp_path):
    # On a loaded machine the final checkpoint can take the whole stop deadline; a run that finished
    # its budget (no scheduler's grace period to fit) still gets its evaluations' rows.
    program, calls, clock = silent_program(monkeypatch, tmp_path, actors=2)
    program.options = ProgramOptions(stop_timeout_seconds=20.0, final_evaluation_timeout_seconds=300.0)
    program.stop("finished")
    assert "evaluator.finish" in calls
    assert clock.waits[0] == 20.0  # the learner's final checkpoint: the whole stop deadline
    assert 300.0 in clock.waits  # the evaluator's run: a window of its own, after the deadline
    assert sum(clock.waits) == pytest.approx(320.0)  # and no more: the rows' drain has what is left, 0


def test_a_stopped_run_keeps_the_evaluator_within_the_stop_deadline(monkeypatch, tmp_path):
    program, _, clock = silent_program(monkeypatch, tmp_path, actors=2)
    program.options = ProgramOptions(stop_timeout_seconds=20.0, final_evaluation_timeout_seconds=300.0)
    program.stop("interrupted")  # a signal: the scheduler's grace period bounds everything
    assert sum(clock.waits) <= 20.0 and 300.0 not in clock.waits
    with pytest.raises(ValueError, match="final_evaluation_timeout_seconds must be > 0 seconds"):
        ProgramOptions(final_evaluation_timeout_seconds=0.0)


def test_a_stopped_run_says_the_steps_of_the_checkpoint_it_continues_from(tmp_path):
    """The actors went on to 1275 env steps while the learner wrote its final checkpoint at 1200: the
    line "interrupted at N env steps" must say 1200, what `--resume` continues from."""
    import numpy as np

    from dmpo.lifecycle.checkpoints import CheckpointState, TrainingCheckpoints
    from dmpo.run.distributed.executor import RayExecutor

    checkpoints = TrainingCheckpoints(tmp_path / "checkpoints")
    for steps in (1000, 1200):
        state = CheckpointState(env_steps=steps, learner_steps=steps // 10, counts={"actor_steps": steps},
                                num_observations=steps, learning_starts=100, episodes=steps // 200,
                                evaluations=0, distributed=True)
        checkpoints.save(steps, {"w": np.zeros(2)}, state.to_json())
    executor = RayExecutor(types.SimpleNamespace(path=tmp_path))
    executor._program_started = True
    executor.program = types.SimpleNamespace(stop=lambda status: types.SimpleNamespace(
        status=status, counts={"actor_steps": 1275}, evaluator_returns=[], learner={}))
    executor.interrupted()
    assert executor.env_steps() == 1200
