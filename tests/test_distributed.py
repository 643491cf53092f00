"""Distributed DMPO on Ray: replay node and clients, variable client, counters, the whole program.

One private local Ray cluster (2 CPUs, conftest's `shared_ray_cluster`) serves the module. The program
tests use tiny networks and a fake environment; what they pin down: actors fill replay and the learner
steps, the replay counters stay inside the rate limiter's window at every snapshot, a killed actor is
replaced and training goes on, a killed learner stops everything with a clear error and `resume=True`
continues from the checkpoint with counts that add up exactly, and a program that started its own
cluster leaves no Ray process behind after Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Nodes are new processes: hand them the tests' persistent XLA cache through the environment.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.environ.get("DMPO_TEST_JAX_CACHE", str(Path.home() / ".cache" / "dmpo-test-xla")),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import psutil  # noqa: E402
import ray  # noqa: E402
from ray import cloudpickle  # noqa: E402

import waiting  # noqa: E402
from dmpo.agent.builder import DMPOBuilder  # noqa: E402
from dmpo.agent.core import DMPO  # noqa: E402
from dmpo.config import ConfigError, DMPOConfig, LearnerConfig, NetworkConfig, TrainConfig  # noqa: E402
from dmpo.distributed import (  # noqa: E402
    DistributedProgram,
    NodeFailure,
    ProgramOptions,
    run_distributed,
)
from dmpo.envs import make_environment_spec  # noqa: E402
from dmpo.envs.fakes import FakeEnvironment  # noqa: E402
from dmpo.lifecycle.checkpoints import (
    CheckpointState,  # noqa: E402
    TrainingCheckpoints,  # noqa: E402
)
from dmpo.replay import MinSize, SampleToInsertRatio, Table, transition_signature  # noqa: E402
from dmpo.run.distributed.counter_service import RemoteCounterService, make_child_counter  # noqa: E402
from dmpo.run.distributed.replay_client import RemoteReplayWriter, RemoteTableSampler  # noqa: E402
from dmpo.run.distributed.replay_service import ReplayServiceConfig, make_replay_service  # noqa: E402
from dmpo.run.distributed.variables import AsyncVariableClient, VariablePublisher  # noqa: E402
from dmpo.run.run import ClusterSettings, Run  # noqa: E402

pytestmark = pytest.mark.ray

# Functions and classes below run inside Ray workers, which cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TINY = DMPOConfig(
    batch_size=8,
    min_replay_size=32,
    max_replay_size=2000,
    samples_per_insert=4.0,
    n_step=2,
    learner=LearnerConfig(num_samples=2),
    networks=NetworkConfig(
        policy_layer_sizes=(8,), critic_layer_sizes=(8,), num_atoms=5, vmin=-5.0, vmax=5.0
    ),
)
EPISODE_LENGTH = 10
DEADLINE = 240.0  # seconds any wait in this module may take on a busy 2-core machine


def fake_environment(seed: int) -> FakeEnvironment:
    return FakeEnvironment(observation_shape=(3,), action_dim=1, episode_length=EPISODE_LENGTH,
                           seed=seed % 1000)


def fake_builder(**overrides) -> DMPOBuilder:
    return DMPOBuilder(dataclasses.replace(TINY, **overrides), make_environment_spec(fake_environment(0)))


def fake_signature():
    return transition_signature(make_environment_spec(fake_environment(0)))


def train_config(**overrides) -> TrainConfig:
    """The run the program tests train: the fake task (given as env_factory), tiny agent, 2 actors."""
    base = dict(env="test:fake", steps=10**9, seed=3, actors=2, eval_every=100, eval_episodes=1,
                checkpoint_every=200, keep_checkpoints=2, agent=TINY)
    base.update(overrides)
    return TrainConfig(**base)


def fake_batch(count: int, start: int = 0):
    """`count` transitions whose observations count up from `start` (so each is recognisable)."""
    signature = fake_signature()
    values = np.arange(start, start + count, dtype=np.float32)

    def leaf(spec):
        return np.broadcast_to(
            values.reshape((count,) + (1,) * len(spec.shape)), (count, *spec.shape)
        ).astype(spec.dtype)

    return type(signature)(*(leaf(spec) for spec in signature))



def wait_for(condition, what: str, timeout: float = DEADLINE, period: float = 0.25):
    return waiting.wait_for(condition, what, timeout, period)


@pytest.fixture
def cluster(shared_ray_cluster):
    return shared_ray_cluster  # kept until the end of this module, or longer for the modules after it


# ------------------------------------------------------------------------------------ rate limiter


def test_rate_limiter_follows_the_spec_and_guards_narrow_windows():
    limiter = fake_builder(samples_per_insert=32.0, min_replay_size=1000).make_rate_limiter("ratio")
    assert isinstance(limiter, SampleToInsertRatio)
    assert (limiter.min_diff, limiter.max_diff) == (28800.0, 35200.0)  # algorithm.md §2 defaults
    # 0.1·spi·min = 0.8 < 2·spi = 1.0 would be too narrow for Reverb: the guard widens it to 2.
    small = fake_builder(samples_per_insert=0.5, min_replay_size=16).make_rate_limiter("ratio")
    assert small.max_diff - small.min_diff >= 2.0
    unlimited = fake_builder(samples_per_insert=None).make_rate_limiter("ratio")
    assert unlimited == MinSize(TINY.min_replay_size)


# -------------------------------------------------------------------------- replay node and clients


def test_writer_backpressure_and_prefetching_sampler_obey_the_ratio(cluster):
    spi, min_size = 2.0, 16
    limiter = SampleToInsertRatio(spi, min_size, 4.0)  # window [28, 36] of inserts·spi − samples
    replay = make_replay_service(
        fake_builder(max_replay_size=1000),
        ReplayServiceConfig(
            rate_limiter=limiter,
            seed=0,
            max_concurrent_inserts=3,
            max_concurrent_samples=3,
            call_timeout=0.2,
        ),
    )
    writer = RemoteReplayWriter(replay, max_in_flight=2, poll_seconds=0.1)
    errors: list[BaseException] = []

    def write_all():
        try:
            for start in range(0, 96, 8):
                writer.insert_batch(fake_batch(8, start))
            writer.flush()
        except Exception as error:  # expected: the table is closed while the writer still waits
            errors.append(error)

    thread = threading.Thread(target=write_all, daemon=True)
    thread.start()
    # Without samples the limiter admits inserts only while (inserts+1)·2 − 0 ≤ 36: 18 items.
    stats = wait_for(
        lambda: (s := ray.get(replay.stats.remote())).waiting_inserts > 0 and s, "a blocked insert"
    )
    assert stats.inserts == 18 and thread.is_alive()
    assert writer.in_flight <= 2  # the actor-side bound: its loop waits instead of queueing more
    # The wait under way counts while it lasts (a benchmark window reads it mid-wait).
    first = writer.blocked_seconds
    time.sleep(0.3)
    assert writer.blocked_seconds >= first + 0.3 and thread.is_alive()

    builder = fake_builder(batch_size=4, prefetch_size=2)
    stream = builder.make_dataset(RemoteTableSampler(replay), prefetch=True, num_workers=2, poll_interval=0.1)
    # 120 consumed samples need inserts·2 − 121 ≥ 28, i.e. ≥ 75 inserts: the writer was let through.
    seen = [next(stream) for _ in range(30)]
    assert all(batch.observation.shape == (4, 3) for batch in seen)
    stats = ray.get(replay.stats.remote())
    assert 75 <= stats.inserts < 96 and stats.samples >= 120 and thread.is_alive()
    assert stats.inserts <= writer.items_sent <= stats.inserts + 2 * 8  # at most 2 calls of 8 in flight
    assert limiter.min_diff <= stats.inserts * spi - stats.samples <= limiter.max_diff
    # Every sampled item is one that was written (observations count 0..95).
    values = np.concatenate([batch.observation[:, 0] for batch in seen])
    assert values.min() >= 0 and values.max() < 96 and np.all(values == np.round(values))

    # Closing the table ends the writer's blocked insert with an error instead of a hang.
    stream.close()
    ray.get(replay.close.remote())
    thread.join(timeout=30)
    assert not thread.is_alive() and len(errors) == 1 and "closed" in str(errors[0])
    ray.kill(replay)


def test_partial_samples_reach_the_learner_when_writers_are_slow(cluster):
    """spi = 1 and a writer slower than a batch per call: the node hands out partial batches (the
    table counted those samples), the learner's dataset joins them, and no sampled item is lost."""
    batches, batch_size = 3, 8
    # samples ≤ inserts (min_diff 0), inserts ≤ samples + 2 (max_diff 2): writer and sampler in lockstep.
    limiter = SampleToInsertRatio(1.0, 1, (0.0, 2.0))
    replay = make_replay_service(
        fake_builder(max_replay_size=1000),
        ReplayServiceConfig(rate_limiter=limiter, seed=0, call_timeout=0.2),
    )
    done = threading.Event()

    def write_slowly():  # one item per 0.1 s: at most ~2 items fit in one 0.2 s sample call
        for index in range(batches * batch_size):
            ray.get(replay.insert_batch.remote(fake_batch(1, index)))
            time.sleep(0.1)
        done.set()

    writer = threading.Thread(target=write_slowly, daemon=True)
    writer.start()
    builder = fake_builder(batch_size=batch_size, prefetch_size=2)
    # One sampling worker: with several, the last items could sit in different half-built batches.
    stream = builder.make_dataset(RemoteTableSampler(replay), prefetch=True, poll_interval=0.2)
    delivered = []
    try:
        deadline = time.monotonic() + 60
        while len(delivered) < batches and time.monotonic() < deadline:
            try:
                delivered.append(next(stream))
            except StopIteration:
                break
        writer.join(timeout=60)
        stats = ray.get(replay.stats.remote())
    finally:
        stream.close()
        ray.kill(replay)
    assert len(delivered) == batches, f"only {len(delivered)} of {batches} batches arrived; {stats}"
    assert all(batch.observation.shape == (batch_size, 3) for batch in delivered)
    assert done.is_set() and stats.inserts == batches * batch_size
    assert stats.samples == batches * batch_size  # every sample the table counted was delivered
    values = np.concatenate([batch.observation[:, 0] for batch in delivered])
    assert values.min() >= 0 and values.max() < batches * batch_size  # written items only


# ---------------------------------------------------------------------------------- variable client


class SlowLearner:
    """Answers `get_variables` like the learner node, after `delay` seconds, counting the requests."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0

    def get_variables(self):
        self.requests += 1
        version = self.requests
        time.sleep(self.delay)
        return version, [ray.put({"w": np.full(3, version, np.float32)})]

    def count(self):
        return self.requests


def test_variable_client_fetches_asynchronously_every_period(cluster):
    learner = ray.remote(max_concurrency=4)(SlowLearner).remote(0.5)
    client = AsyncVariableClient(learner.get_variables.remote, update_period=3)
    assert client.version == 1 and np.all(client.params["w"] == 1)  # blocking first fetch
    for _ in range(2):
        started = time.monotonic()
        assert client()["w"][0] == 1
        assert time.monotonic() - started < 0.25  # never waits for the learner
    assert ray.get(learner.count.remote()) == 1  # period not reached yet
    client()  # third call: request sent, old parameters still in use
    wait_for(lambda: ray.get(learner.count.remote()) == 2, "the second request")
    for _ in range(5):
        client()  # calls while the fetch is pending never send another request
    assert ray.get(learner.count.remote()) == 2
    wait_for(lambda: client()["w"][0] == 2, "the fetched parameters to be swapped in")
    assert client.version == 2 and client.num_fetches == 2
    client.update(wait=True)  # an explicit blocking update
    assert client.version == 3
    ray.kill(learner)


def test_publisher_copies_once_per_version_or_per_interval(cluster):
    step, now = [0], [0.0]
    reads = []

    def read():
        reads.append(step[0])
        return {"w": np.full(2, step[0], np.float32)}

    exact = VariablePublisher(read, lambda: step[0])
    first = exact.get()
    assert exact.get() == first and reads == [0]  # same version: the same object, no new copy
    step[0] = 1
    version, (ref,) = exact.get()
    assert version == 1 and reads == [0, 1] and ray.get(ref)["w"][0] == 1

    reads.clear()
    throttled = VariablePublisher(read, lambda: step[0], min_interval=2.0, clock=lambda: now[0])
    throttled.get()
    step[0], now[0] = 2, 1.5
    assert throttled.get()[0] == 1 and reads == [1]  # within the interval: the older copy is served
    now[0] = 2.0
    assert throttled.get()[0] == 2 and reads == [1, 2] and throttled.copies == 2


# ------------------------------------------------------------------------------------------ counters


def count_steps(service, prefix: str, steps: int) -> dict:
    counter = make_child_counter(service, prefix, time_delta=1.0)
    for _ in range(steps):
        counter.increment(steps=1)
    return counter.sync()


def test_child_counters_in_other_processes_add_up_and_restore_adds(cluster):
    service = RemoteCounterService.remote()
    push = ray.remote(count_steps)
    ray.get(
        [
            push.remote(service, "actor", 250),
            push.remote(service, "actor", 170),
            push.remote(service, "learner", 40),
        ]
    )
    assert ray.get(service.get_counts.remote()) == {"actor_steps": 420, "learner_steps": 40}
    ray.get(service.restore.remote({"actor_steps": 1000}))
    assert ray.get(service.get_counts.remote())["actor_steps"] == 1420
    ray.kill(service)


# ------------------------------------------------------------------------------------- the program


def open_program(config, run_dir, *, env_factory=fake_environment, options=None, resume=False):
    """A program of an opened `Run` (the run's folder, lock, resume rules), started by the caller."""
    run = Run(config, run_dir, resume=resume, env_factory=env_factory, progress=False,
              cluster=ClusterSettings(options=options))
    run.open()
    try:
        return DistributedProgram(run)
    except BaseException:
        run.close()
        raise


def test_bad_arguments_fail_before_any_node_starts(tmp_path):
    with pytest.raises(ValueError, match="evaluator_period_seconds"):
        ProgramOptions(evaluator_period_seconds=-1.0)
    with pytest.raises(TypeError, match="TrainConfig"):
        open_program(TINY, tmp_path / "a")
    with pytest.raises(ConfigError, match="actors"):
        DistributedProgram(Run(train_config(actors=0), tmp_path / "a", env_factory=fake_environment))
    with pytest.raises(ConfigError, match="overlap_learner"):
        train_config(overlap_learner=True)
    # One learner call runs sgd_steps_per_call updates: a budget between two calls could not be exact.
    four_per_call = dataclasses.replace(TINY, learner=dataclasses.replace(TINY.learner, sgd_steps_per_call=4))
    with pytest.raises(ConfigError, match="max_learner_steps must be a multiple of.*sgd_steps_per_call"):
        open_program(train_config(agent=four_per_call), tmp_path / "c", options=options(max_learner_steps=10))
    for bad in ({"CPU": 1}, {"worker": -1}, ["worker"], {"worker": True}):
        with pytest.raises(ValueError, match="actor_resources"):
            options(actor_resources=bad)
    with pytest.raises(ConfigError, match="checkpoint"):
        open_program(train_config(agent=dataclasses.replace(TINY, checkpoint=False)), tmp_path / "a",
                     resume=True)
    with pytest.raises(FileNotFoundError, match="cannot resume"):
        open_program(train_config(), tmp_path / "missing", resume=True)
    with pytest.raises(Exception, match="unknown environment name"):
        open_program(train_config(env="nope:nothing"), tmp_path / "b", env_factory=None)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    old = tmp_path / "old"
    (old / "checkpoints" / "step_000000000100").mkdir(parents=True)
    (old / "checkpoints" / "step_000000000100" / "state.json").write_text("{}")
    with pytest.raises(FileExistsError, match="--resume"):
        open_program(train_config(), old)


def read_csv(path):
    import csv

    with open(path) as handle:
        return list(csv.DictReader(handle))


def assert_trees_equal(a, b) -> None:
    import jax

    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b and len(leaves_a) == len(leaves_b) > 0
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def options(**overrides) -> ProgramOptions:
    base = dict(variable_update_period=25, insert_batch_size=8, poll_seconds=0.25, log_time_delta=1.0)
    base.update(overrides)
    return ProgramOptions(**base)


def check_ratio_window(history, limiter: SampleToInsertRatio) -> int:
    """Every snapshot keeps inserts·spi − samples inside the limiter's window; returns how many sampled."""
    sampled = 0
    for _, stats in history:
        diff = stats.inserts * limiter.samples_per_insert - stats.samples
        assert diff <= max(limiter.max_diff, limiter.min_size_to_sample * limiter.samples_per_insert), stats
        if stats.samples:
            sampled += 1
            assert diff >= limiter.min_diff, stats
    return sampled


def _refuses_calls(handle) -> bool:
    try:
        ray.get(handle.ping.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return True
    return False


def poll_until(program: DistributedProgram, condition, what: str):
    def step():
        assert not program.poll(), "the program ended early"
        return condition()

    return wait_for(step, what, period=program.options.poll_seconds)


def test_program_trains_replaces_dead_actors_stops_on_learner_death_and_resumes(cluster, tmp_path):
    run_dir = tmp_path / "run"
    limiter = fake_builder().make_rate_limiter("ratio")
    program = open_program(train_config(), run_dir, options=options())
    program.start()
    try:
        poll_until(program, lambda: program.counts.get("learner_steps", 0) >= 10, "10 learner steps")
        # Both actors contribute, and replay holds what they wrote.
        per_actor = ray.get([handle.stats.remote() for handle in program.actor_handles])
        assert all(stats["steps"] > 0 for stats in per_actor)

        # Kill actor 0: it is replaced (new seed) and learning goes on.
        old_seed = per_actor[0]["seed"]
        ray.kill(program.actor_handles[0])
        poll_until(program, lambda: program.actor_restarts == 1, "the dead actor to be replaced")
        steps_at_restart = program.counts["learner_steps"]
        new_stats = poll_until(
            program,
            lambda: (s := ray.get(program.actor_handles[0].stats.remote()))["steps"] > 0 and s,
            "the replacement actor to act",
        )
        assert new_stats["seed"] != old_seed
        poll_until(
            program,
            lambda: program.counts["learner_steps"] >= steps_at_restart + 10,
            "learner steps after the restart",
        )
        poll_until(
            program,
            lambda: TrainingCheckpoints(run_dir / "checkpoints").latest() is not None,
            "a periodic checkpoint",
        )
        assert check_ratio_window(program.replay_history, limiter) >= 3

        # Kill the learner: the next passes raise a clear error; stop() tears everything down.
        ray.kill(program.learner)
        with pytest.raises(NodeFailure, match=r"learner node failed.*resume=True"):
            wait_for(lambda: program.poll() and False, "the learner failure to be noticed", timeout=60)
    finally:
        program.stop("failed")
        program.run.close()
    # ray.kill only asks for the kill: a call sent just after it may still be served (it was once, under
    # load), so each node must refuse calls within the deadline, not at once.
    for name, handle in (("learner", program.learner), ("replay", program.replay),
                         ("counter", program.counter),
                         *((f"actor {i}", h) for i, h in enumerate(program.actor_handles))):
        wait_for(lambda handle=handle: _refuses_calls(handle), f"the {name} node to be gone", timeout=30)
    assert psutil.pid_exists(os.getpid())

    latest = TrainingCheckpoints(run_dir / "checkpoints").latest()
    saved = json.loads((latest / "state.json").read_text())
    saved_replay = Table.restore(latest / "replay.npz").stats()
    assert saved_replay.inserts > 0
    # The single-process layout: state.json is a CheckpointState, the learner state loads locally.
    assert set(saved) == {"format", "format_version",
                          *(field.name for field in dataclasses.fields(CheckpointState))}
    assert saved["wall_seconds"] > 0  # the run's wall clock, carried on by a resume
    assert saved["distributed"]
    local = DMPO(make_environment_spec(fake_environment(0)), TINY, seed=0)
    learner_state, _, replay_file = TrainingCheckpoints.load(latest, local.learner.save_state())
    local.learner.restore_state(learner_state)
    assert replay_file is not None and saved["env_steps"] >= 200  # the checkpoint_every=200 boundary
    target = saved["learner_steps"] + 15
    result = run_distributed(train_config(), run_dir, env_factory=fake_environment, resume=True,
                             progress=False, options=options(max_learner_steps=target, log_time_delta=30.0))
    # Metrics leave the device only for the rows the learner node's own logger writes (one at the
    # start, then at most one per 30 s), not on each of the 15 steps.
    learner_rows = read_csv(run_dir / "logs" / "learner" / "logs.csv")
    written = [row for row in learner_rows if int(row["learner_steps"]) > saved["learner_steps"]]
    assert result.learner["metric_fetches"] == len(written) <= 2
    assert result.status == "finished" and result.resumed_from == saved["learner_steps"]
    assert result.learner["steps"] == target and result.counts["learner_steps"] == target
    # Counts continue from the checkpoint and add up exactly across nodes.
    own_steps = sum(actor["steps"] for actor in result.actors)
    # Fresh data is needed (the restored ratio leaves a few steps of slack), but on a loaded machine the
    # learner's 15 steps can end before the slower actor has acted at all: at least one actor must have.
    assert len(result.actors) == 2 and own_steps > 0
    for actor in result.actors:  # whole episodes, all sent: T + n − 1 items per episode of T ≥ n steps
        assert actor["steps"] == EPISODE_LENGTH * actor["episodes"]
        assert actor["items_sent"] == (EPISODE_LENGTH + TINY.n_step - 1) * actor["episodes"]
    assert result.counts["actor_steps"] == saved["counts"]["actor_steps"] + own_steps
    assert result.counts["actor_episodes"] == (
        saved["counts"]["actor_episodes"] + sum(actor["episodes"] for actor in result.actors)
    )
    assert result.evaluator_returns, "the evaluator ran no episode"
    assert result.evaluations > saved["evaluations"]  # env-step boundaries of eval_every=100 (and the end)
    assert check_ratio_window(result.replay_history, limiter) >= 1
    # The replay node resumed from the checkpointed table (its lifetime counters continue).
    assert result.replay_history[0][1].inserts >= saved_replay.inserts
    assert result.replay.inserts > saved_replay.inserts
    assert (run_dir / "logs" / "learner" / "logs.csv").is_file()
    assert (run_dir / "logs" / "evaluator" / "logs.csv").is_file()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"

    # Resume once more without a learner step: the learner node holds exactly the checkpoint's state,
    # and each node reports what it built, which must be what the single-process agent builds.
    latest = TrainingCheckpoints(run_dir / "checkpoints").latest()
    final = json.loads((latest / "state.json").read_text())
    program = open_program(train_config(), run_dir, resume=True,
                           options=options(max_learner_steps=final["learner_steps"]))
    program.start()
    try:
        restored = ray.get(program.learner.learner_state.remote(), timeout=DEADLINE)
        replay = ray.get(program.replay.describe.remote(), timeout=DEADLINE)
        actor = ray.get(program.actor_handles[0].describe.remote(), timeout=DEADLINE)
        learner = ray.get(program.learner.describe.remote(), timeout=DEADLINE)
    finally:
        program.stop()
        program.run.close()
    checkpointed, _, _ = TrainingCheckpoints.load(latest, local.learner.save_state())
    assert int(restored.steps) == final["learner_steps"] == int(checkpointed.steps)
    assert_trees_equal(restored, checkpointed)  # params, optimiser states, duals, step, key
    overlapped = DMPO(make_environment_spec(fake_environment(0)), TINY, seed=0, overlap_learner=True)
    try:
        assert replay["table_class"] == type(overlapped.table).__name__ == "Table"
        assert replay["rate_limiter"] == overlapped.table.rate_limiter == SampleToInsertRatio(
            4.0, TINY.min_replay_size, max(0.1 * 4.0 * TINY.min_replay_size, 8.0, 1.0))
        assert replay["signature"] == overlapped.table.signature == actor["signature"]
        assert replay["max_size"] == TINY.max_replay_size
        assert (actor["adder_class"], actor["n_step"]) == (type(overlapped.adder).__name__, TINY.n_step)
        assert actor["discount"] == pytest.approx(float(overlapped.adder.discount))
        assert actor["total_steps"] == train_config().steps
        assert learner["learner_config"] == overlapped.learner.config == TINY.learner
        assert learner["agent_config"] == TINY
    finally:
        overlapped.close()


# ------------------------------------------------------------- own cluster, Ctrl-C, nothing left over

# The driver installs Python's Ctrl-C handler itself: a child inherits an *ignored* SIGINT from its
# parent, and Python then leaves it ignored. A non-interactive shell starts background jobs
# (`make test &`, `nohup ... &`) with SIGINT ignored, so run that way the driver never saw the signal.
_SCRIPT = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from ray import cloudpickle
sys.path.insert(0, {tests!r})
import test_distributed as t
cloudpickle.register_pickle_by_value(t)

def report(program):
    print("learner_steps", program.counts.get("learner_steps", 0), flush=True)

t.run_distributed(t.train_config(actors=1, seed=1, eval_every=0, checkpoint_every=0), {run_dir!r},
                  env_factory=t.fake_environment, num_cpus=2, progress=False, options=t.options(),
                  on_poll=report)
"""


def session_processes(session_dir: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(session_dir in part for part in process.info["cmdline"] or ()):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_own_cluster_ctrl_c_writes_a_checkpoint_and_leaves_no_processes(tmp_path):
    run_dir = tmp_path / "run"
    script = textwrap.dedent(_SCRIPT).format(tests=str(Path(__file__).parent), run_dir=str(run_dir))
    driver = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(driver.stdout.readline, "")), daemon=True)
    reader.start()
    try:

        def learning() -> bool:
            assert driver.poll() is None, "".join(lines)
            return any(line.startswith("learner_steps") and int(line.split()[1]) >= 3 for line in lines)

        wait_for(learning, "the subprocess's learner to step")
        children = psutil.Process(driver.pid).children(recursive=True)
        session_dirs = {
            part.split("--session-dir=", 1)[1]
            for child in children
            for part in _cmdline(child)
            if part.startswith("--session-dir=")
        }
        assert session_dirs, [_cmdline(child) for child in children]
        names = {child.name() for child in children if child.is_running()}
        assert any("raylet" in name for name in names) and any("gcs_server" in name for name in names), names
        driver.send_signal(signal.SIGINT)
        try:
            driver.wait(timeout=120)
        except subprocess.TimeoutExpired:
            driver.kill()
            reader.join(timeout=10)
            pytest.fail("the driver did not exit within 120 s of SIGINT; its output:\n" + "".join(lines))
    finally:
        if driver.poll() is None:
            driver.kill()
    reader.join(timeout=10)
    output = "".join(lines)
    assert driver.returncode != 0 and "KeyboardInterrupt" in output, output
    latest = TrainingCheckpoints(run_dir / "checkpoints").latest()  # periodic ones are 10 min apart
    assert latest is not None, output
    assert json.loads((latest / "state.json").read_text())["learner_steps"] >= 3
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    leftovers = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for session in session_dirs:
        leftovers += session_processes(session)
    assert not leftovers, [(p.pid, _cmdline(p)) for p in leftovers]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
