"""Operating the distributed program on a Ray cluster, without starting one: the placement check
before any node starts, the waiting-node report, what a node's error says and when a failing node is
not restarted (dmpo.run.distributed.placement, dmpo.run.distributed.node_errors)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from dmpo.envs import EnvError  # noqa: E402
from dmpo.run.distributed import ray_internals  # noqa: E402
from dmpo.run.distributed.node_errors import RepeatedFailures, describe, is_transient, node_error  # noqa: E402
from dmpo.run.distributed.options import ProgramOptions  # noqa: E402
from dmpo.run.distributed.placement import (  # noqa: E402
    NodeDemand,
    PendingNodes,
    PlacementError,
    check_placement,
    program_demands,
)

NAN_MESSAGE = "gym:x: step 50 of episode 0: the reward is not finite: nan"


def demands(actors: int = 2, use_gpu: bool = False, **resources) -> list[NodeDemand]:
    options = ProgramOptions(**resources)
    return program_demands(actors=actors, evaluator=True, use_gpu=use_gpu, options=options)


def test_learner_and_replay_asking_the_heads_only_unit_is_refused_naming_the_resource():
    # The layout of the old README example: the head has one `learner_node`, both nodes ask for it.
    asked = demands(learner_resources={"learner_node": 1}, replay_resources={"learner_node": 1})
    with pytest.raises(PlacementError) as error:
        check_placement(asked, {"CPU": 16.0, "learner_node": 1.0})
    message = str(error.value)
    assert "'learner_node'" in message and "ask for 2 " in message and "the cluster has 1;" in message
    assert "learner 1" in message and "replay 1" in message and "\n" not in message
    check_placement(asked, {"CPU": 16.0, "learner_node": 2.0})  # room for both: no error


def test_actors_and_the_evaluator_add_up_and_a_gpu_learner_needs_a_gpu():
    asked = demands(actors=3, actor_resources={"worker": 1})  # 3 actors + the evaluator
    check_placement(asked, {"worker": 4.0})
    with pytest.raises(PlacementError, match=r"ask for 4 'worker' in all \(3 actors 3, evaluator 1\), "
                                             r"the cluster has 3;"):
        check_placement(asked, {"worker": 3.0})
    with pytest.raises(PlacementError, match="'GPU'"):
        check_placement(demands(use_gpu=True), {"CPU": 8.0})
    check_placement(demands(), {})  # nodes that ask for nothing fit any cluster


class FakeHandle:
    def __init__(self, actor_id: str) -> None:
        self.actor_id = actor_id


def test_a_node_waiting_for_a_lost_machine_is_named_once_and_a_starting_node_never(monkeypatch):
    states = {"a0": "ALIVE", "a1": "PENDING_CREATION"}
    cluster = {"worker": 2.0}
    now = [0.0]
    monkeypatch.setattr(ray_internals, "actor_id", lambda handle: handle.actor_id)
    monkeypatch.setattr(ray_internals, "actor_state", lambda actor_id: states[actor_id])
    monkeypatch.setattr(ray, "cluster_resources", lambda: dict(cluster))
    handles = {"actor 0": (FakeHandle("a0"), {"worker": 1}), "actor 1": (FakeHandle("a1"), {"worker": 1})}
    pending = PendingNodes(lambda: handles, [NodeDemand("actor", {"worker": 1}, 2)], report_after=10.0,
                           period=5.0, clock=lambda: now[0])
    for now[0] in (0.0, 5.0, 10.0, 15.0, 20.0):  # the cluster has room: actor 1 is only starting
        assert pending.poll() == []
    cluster["worker"] = 1.0  # the machine of one unit was lost: actor 1 has nowhere to go
    now[0] = 23.0
    assert pending.poll() == []  # checked at most every 5 s
    now[0] = 25.0
    [line] = pending.poll()
    assert line.startswith("the actor 1 node has waited 25 s for a place on the Ray cluster"), line
    assert "2 'worker' asked in all, 1 in the cluster" in line and "\n" not in line
    now[0] = 30.0
    assert pending.poll() == []  # named once
    handles["actor 1"] = (FakeHandle("a2"), {"worker": 1})  # its replacement waits in turn
    states["a2"] = "PENDING_CREATION"
    for now[0] in (35.0, 40.0):  # its own wait starts when it is first seen
        assert pending.poll() == []
    now[0] = 45.0
    assert [line.split(" has waited")[0] for line in pending.poll()] == ["the actor 1 node"]


def remote_failure(error: BaseException) -> BaseException:
    """What `ray.get` raises for an exception raised inside a Ray actor's method."""
    traceback = ("\x1b[36mray::ActorNode.run()\x1b[39m (pid=1234, ip=127.0.0.1)\n  File \"actor.py\", "
                 f"line 1, in run\n{type(error).__name__}: {error}")
    return ray.exceptions.RayTaskError("ActorNode.run", traceback, error).as_instanceof_cause()


def test_a_nodes_error_is_its_own_type_and_message_without_colour_codes():
    wrapped = remote_failure(EnvError(NAN_MESSAGE))
    assert isinstance(wrapped, ray.exceptions.RayTaskError)
    assert "\x1b" in str(wrapped)  # what Ray hands the driver
    original = node_error(wrapped)
    assert type(original) is EnvError and str(original) == NAN_MESSAGE
    assert describe(wrapped) == f"EnvError: {NAN_MESSAGE}"
    lost = ray.exceptions.ActorDiedError()
    assert node_error(lost) is lost and is_transient(lost) and not is_transient(wrapped)
    assert "\x1b" not in describe(lost)


def test_the_same_failure_twice_in_a_row_is_repeated_and_a_lost_node_breaks_the_row():
    failures = RepeatedFailures()
    assert not failures.repeated("actor 0", remote_failure(EnvError(NAN_MESSAGE)))
    # The replacement (another seed) fails the same way at another step: the same fault.
    assert failures.repeated("actor 0", remote_failure(EnvError(NAN_MESSAGE.replace("50", "73"))))
    assert not failures.repeated("actor 1", remote_failure(EnvError(NAN_MESSAGE)))  # per node
    assert not failures.repeated("actor 1", ray.exceptions.ActorDiedError())  # transient: restart
    assert not failures.repeated("actor 1", remote_failure(EnvError(NAN_MESSAGE)))  # a new row
    assert not failures.repeated("actor 1", remote_failure(ValueError("another fault")))
    assert not failures.repeated("actor 1", ray.exceptions.ActorDiedError())
    assert not failures.repeated("actor 1", ray.exceptions.ActorDiedError())  # lost twice: still restarted


KEEP = "--keep-ray-logs keeps the files of the private Ray cluster that --actors N starts; "


@pytest.mark.parametrize("argv, message", [
    (["--keep-ray-logs"], KEEP + "it needs --actors N (N >= 1)"),
    (["--keep-ray-logs", "--actors", "1", "--ray-address", "127.0.0.1:1"], KEEP + "with --ray-address"),
    (["--max-node-restarts", "2"],
     "--max-node-restarts bounds the recoveries of Ray nodes; it needs --actors N"),
    (["--node-restart-deadline", "60"],
     "--node-restart-deadline bounds the recoveries of Ray nodes; it needs --actors N"),
    (["--actors", "1", "--max-node-restarts", "-1"], "--max-node-restarts must be an integer >= 0, got -1"),
    (["--actors", "1", "--node-restart-deadline", "-5"],
     "--node-restart-deadline must be >= 0 seconds, got -5"),
])
def test_cluster_flags_out_of_place_or_range_are_one_line_before_anything_starts(argv, message, capsys,
                                                                                 tmp_path):
    from dmpo.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run-dir", str(tmp_path / "run"), *argv])
    output = capsys.readouterr()
    assert exit_info.value.code == 2 and output.err.startswith(f"dmpo: error: {message}")
    assert output.err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_program_options_refuse_a_negative_recovery_bound_or_deadline():
    from dmpo.distributed import ProgramOptions

    for field, value in (("max_node_restarts", -1), ("max_node_restarts", True), ("max_node_restarts", 1.5),
                         ("node_restart_deadline_seconds", -0.5)):
        with pytest.raises(ValueError, match=f"{field} must be"):
            ProgramOptions(**{field: value})
    assert ProgramOptions(max_node_restarts=0, node_restart_deadline_seconds=0).max_node_restarts == 0
