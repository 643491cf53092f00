"""Hierarchical counter: prefixing, time-gated pushes to the parent, thread safety, state round trip."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from dmpo.utils.counting import Counter


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingParent:
    """Stands in for a remote root counter; records what each push carried."""

    def __init__(self) -> None:
        self.root = Counter()
        self.pushes: list[dict] = []

    def increment(self, **counts):
        self.pushes.append(counts)
        return self.root.increment(**counts)


def test_root_counter_sums_and_has_plain_steps_key():
    counter = Counter()
    assert counter.increment(steps=1) == {"steps": 1}
    assert counter.increment(steps=2, episodes=1) == {"steps": 3, "episodes": 1}
    assert counter.get_counts() == {"steps": 3, "episodes": 1}
    assert counter.get_steps_key() == "steps"
    assert Counter(prefix="actor").get_steps_key() == "actor_steps"


def test_children_push_prefixed_counts_and_see_each_other():
    root = Counter()
    actor = Counter(root, "actor", time_delta=0.0)
    learner = Counter(root, "learner", time_delta=0.0)
    actor.increment(steps=10, episodes=1)
    assert learner.increment(steps=1) == {"actor_steps": 10, "actor_episodes": 1, "learner_steps": 1}
    assert root.get_counts() == {"actor_steps": 10, "actor_episodes": 1, "learner_steps": 1}
    assert actor.get_counts() == {"actor_steps": 10, "actor_episodes": 1, "learner_steps": 1}


def test_grandchild_keys_are_prefixed_at_each_level():
    root = Counter()
    middle = Counter(root, "a", time_delta=0.0)
    leaf = Counter(middle, "b", time_delta=0.0)
    leaf.increment(steps=2)
    assert root.get_counts() == {"a_b_steps": 2}


def test_child_pushes_at_most_once_per_time_delta_and_view_stays_exact():
    clock, parent = FakeClock(), RecordingParent()
    child = Counter(parent, "actor", time_delta=1.0, clock=clock)
    assert child.increment(steps=1) == {"actor_steps": 1}  # first call pushes
    assert parent.pushes == [{"actor_steps": 1}]
    for t in (0.2, 0.5, 0.9):
        clock.now = t
        child.increment(steps=1)
    assert len(parent.pushes) == 1  # cached: no calls to the parent within the window
    assert parent.root.get_counts() == {"actor_steps": 1}
    assert child.get_counts() == {"actor_steps": 4}  # cached parent total + unpushed local counts
    clock.now = 1.0
    assert child.increment(steps=1) == {"actor_steps": 5}
    assert parent.pushes[-1] == {"actor_steps": 4}  # only what was counted since the last push
    assert parent.root.get_counts() == {"actor_steps": 5}


def test_cached_view_lags_other_children_until_next_push():
    clock = FakeClock()
    root = Counter()
    actor = Counter(root, "actor", time_delta=1.0, clock=clock)
    learner = Counter(root, "learner", time_delta=0.0)
    actor.increment(steps=1)
    learner.increment(steps=7)
    clock.now = 0.5
    assert actor.get_counts() == {"actor_steps": 1}  # learner's push not yet seen
    clock.now = 1.5
    assert actor.get_counts() == {"actor_steps": 1, "learner_steps": 7}


def test_sync_forces_a_push():
    clock, parent = FakeClock(), RecordingParent()
    child = Counter(parent, "x", time_delta=100.0, clock=clock)
    child.increment(steps=1)
    child.increment(steps=2)
    assert parent.root.get_counts() == {"x_steps": 1}
    child.sync()
    assert parent.root.get_counts() == {"x_steps": 3}


def test_float_counts_and_numpy_values():
    counter = Counter()
    counter.increment(learner_walltime=0.25, steps=np.int64(2))
    counts = counter.increment(learner_walltime=np.float32(0.5))
    assert counts == {"learner_walltime": 0.75, "steps": 2}
    assert type(counts["steps"]) is int
    with pytest.raises(TypeError, match="'steps'"):
        counter.increment(steps="1")


def test_thread_safety_under_concurrent_increments():
    root = Counter()
    children = [Counter(root, f"w{i}", time_delta=0.0) for i in range(2)]
    shared = Counter(root, "shared", time_delta=0.001)
    per_thread = 2000

    def work(child: Counter) -> None:
        for _ in range(per_thread):
            child.increment(steps=1)
            shared.increment(steps=1)

    threads = [threading.Thread(target=work, args=(children[i % 2],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared.sync()
    counts = root.get_counts()
    assert counts["w0_steps"] == counts["w1_steps"] == 2 * per_thread
    assert counts["shared_steps"] == 4 * per_thread


def test_state_dict_round_trip_is_json_and_exact():
    clock = FakeClock()
    root = Counter()
    child = Counter(root, "learner", time_delta=10.0, clock=clock)
    child.increment(steps=3)
    clock.now = 1.0
    child.increment(steps=4, walltime=1.5)  # unpushed
    root_state = json.loads(json.dumps(root.state_dict()))
    child_state = json.loads(json.dumps(child.state_dict()))
    assert child_state == {"counts": {"steps": 4, "walltime": 1.5}, "cache": {"learner_steps": 3}}

    new_root = Counter()
    new_root.load_state_dict(root_state)
    new_child = Counter(new_root, "learner", time_delta=10.0, clock=clock)
    new_child.load_state_dict(child_state)
    assert new_child.get_counts() == child.get_counts() == {"learner_steps": 7, "learner_walltime": 1.5}
    # The first call after restore pushed only the unpushed counts: no double counting.
    assert new_root.get_counts() == {"learner_steps": 7, "learner_walltime": 1.5}
    assert new_child.increment(steps=1) == {"learner_steps": 8, "learner_walltime": 1.5}


def test_bad_arguments():
    with pytest.raises(ValueError, match="time_delta"):
        Counter(time_delta=-1)
    with pytest.raises(KeyError, match="cache"):
        Counter().load_state_dict({"counts": {}})
