"""Every private Ray name dmpo uses (dmpo.run.distributed.ray_internals) still exists in the installed Ray:
a Ray release that moves one fails here, naming it, instead of deep inside a cluster start."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from dmpo.run.distributed import ray_internals  # noqa: E402


@pytest.mark.parametrize("module, attribute", ray_internals.PRIVATE_NAMES)
def test_private_ray_name_exists(module, attribute):
    found = importlib.import_module(module)
    for part in attribute.split("."):
        assert hasattr(found, part), (f"Ray {ray.__version__} has no {module}.{attribute}, which "
                                      "dmpo.run.distributed.ray_internals uses: adapt that module")
        found = getattr(found, part)


def test_a_private_cluster_keeps_its_session_files_in_its_own_temp_folder(shared_ray_cluster):
    # ray.init's private `_temp_dir` keyword (read from **kwargs: a release that drops it ignores it
    # silently) put the session under the cluster's fresh dmpo-ray-* folder, not Ray's shared /tmp/ray.
    session = Path(shared_ray_cluster.session_dir).resolve()
    temp = Path(tempfile.gettempdir()).resolve()
    ignored = f"Ray {ray.__version__} ignored ray.init({ray_internals.TEMP_DIR_ARGUMENT}=...): {session}"
    assert temp in session.parents and session.relative_to(temp).parts[0].startswith("dmpo-ray-"), ignored
    assert Path(ray_internals.session_dir()).resolve() == session  # what the private accessor reports


def test_no_private_ray_name_outside_the_internals_module():
    import pathlib

    import dmpo

    root = pathlib.Path(dmpo.__file__).parent
    users = [str(path.relative_to(root)) for path in root.rglob("*.py")
             if path.name != "ray_internals.py" and ("ray._" in path.read_text() or
                                                     "from ray._" in path.read_text())]
    assert not users, f"private Ray API used outside dmpo/distributed/ray_internals.py: {users}"


RAYLET_REPORT = (  # as ray._private.process_watcher publishes it when a node's raylet dies
    "Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL by the user or "
    "system OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS, (3) Other "
    "termination signals. Last 20 lines of the Raylet logs:\n"
    + "".join(f"    [state-dump]    NodeManager.handler_{n} - 3 total (0 active)\n" for n in range(20)))


def test_a_raylet_death_report_is_printed_once_without_its_log_lines(capsys, monkeypatch):
    from ray._private import worker

    monkeypatch.setattr(worker, "print_to_stdstream", worker.print_to_stdstream)  # restored after
    ray_internals.short_raylet_reports()
    ray_internals.short_raylet_reports()  # a second cluster joined in one process: still one wrapper
    for _ in range(2):  # the node's dashboard agent and its runtime-env agent both publish it
        worker.print_to_stdstream({"lines": [RAYLET_REPORT], "pid": "raylet", "is_err": False}, False)
    worker.print_to_stdstream({"lines": ["an actor's own line"], "pid": 1234, "is_err": False}, False)
    printed = capsys.readouterr().out
    assert "[state-dump]" not in printed, printed
    assert printed.count("Raylet is terminated. Termination is unexpected.") == 1, printed
    assert "raylet.out" in printed and "an actor's own line" in printed, printed


def test_every_node_is_made_without_ray_task_events(monkeypatch):
    """Ray records each call to an actor in its GCS unless the actor is made with task events off; the
    nodes make many calls a second, which grew the GCS process by hundreds of MiB an hour
    (benchmarks/gcs_memory.py). Every node factory makes its actor with them off."""
    from dmpo.run.distributed import actor, counter_service, evaluator, learner_node, replay_service

    made: dict[str, dict] = {}

    class Made:  # what `ray.remote(...)(cls)` returns, started as the factories start it
        def options(self, **options):
            return self

        def remote(self, *args, **kwargs):
            return None

    def fake_remote(**options):
        def wrap(cls):
            made[cls.__name__] = options
            return Made()
        return wrap

    monkeypatch.setattr(ray, "remote", fake_remote)
    config = replay_service.ReplayServiceConfig(seed=0, max_concurrent_inserts=1, max_concurrent_samples=1)
    actor.make_actor_node(None, 0, 0, None, None, None)
    evaluator.make_evaluator_node(None, 0, None, None)
    learner_node.make_learner_node(None, 0, None, None, use_gpu=False)
    replay_service.make_replay_service(None, config)
    assert set(made) == {"ActorNode", "EvaluatorNode", "LearnerNode", "ReplayService"}
    assert all(options.get("enable_task_events") is False for options in made.values()), made
    # The counter service's class is made once, when its module is imported.
    assert counter_service.RemoteCounterService._default_options.get("enable_task_events") is False
