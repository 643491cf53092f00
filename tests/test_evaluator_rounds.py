"""The distributed evaluator starts the rounds asked for in the order the driver asked for them.

The evaluator node is a threaded Ray actor: two `request` calls sent back to back (a stopping run sends
every queued round at once) may run in either order. A run whose evaluator log read 500, 1500, 1000
is what this guards against.

On the driver's side (`evaluations.EvaluationRounds`, with a stand-in node), the rounds go out one at a
time: the next once the previous round's row is back, so that a callback's stop on that row holds
the rest, as in one process."""

from __future__ import annotations

import types

import pytest

from dmpo.run.distributed.evaluator import Round, RoundRequests


def test_rounds_start_in_the_order_the_driver_numbered_them_whatever_order_they_arrive_in():
    rounds = RoundRequests()
    rounds.add(0, Round(500))
    assert rounds.pop_next() == Round(500)
    rounds.add(2, Round(1500, ("final",), index=2, film=True))  # arrives first
    assert rounds.pop_next() is None  # round 1 was asked for before it: wait for it
    rounds.add(1, Round(1000, ("boundary",), index=1))
    assert [rounds.pop_next(), rounds.pop_next(), rounds.pop_next()] == [
        Round(1000, ("boundary",), index=1), Round(1500, ("final",), index=2, film=True), None]
    assert (rounds.received, rounds.started) == (3, 3)


def test_unnumbered_requests_keep_their_arrival_order_and_a_number_is_used_once():
    rounds = RoundRequests()
    rounds.add(None, Round(10))
    rounds.add(None, Round(20))
    assert [rounds.pop_next(), rounds.pop_next()] == [Round(10), Round(20)]
    with pytest.raises(ValueError, match="number 1 was already given"):
        rounds.add(1, Round(30))
    rounds.add(2, Round(30))
    with pytest.raises(ValueError, match="number 2 was already given"):
        rounds.add(2, Round(40))


# ---- the driver's side: `evaluations.EvaluationRounds` sends the rounds one at a time -------------------

class FakeEvaluator:
    """An evaluator node: records the rounds sent to it; `log(steps)` logs the row of a round it ran."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, list, int]] = []
        self.seeds_and_films: list[tuple[int, bool]] = []  # each request's index in the run, and `film`
        self.finished_after: int | None = None
        self.logged: list[dict] = []
        self.request = types.SimpleNamespace(remote=self._request)
        self.finish = types.SimpleNamespace(remote=lambda count: setattr(self, "finished_after", count))
        self.rows = types.SimpleNamespace(remote=lambda start: ("rows", tuple(self.logged[start:])))

    def _request(self, *args, index: int, film: bool) -> None:
        self.requests.append(args)
        self.seeds_and_films.append((index, film))

    def log(self, steps: int) -> None:
        self.logged.append({"env_steps": steps})


class AnsweringRay:
    """`ray.wait` / `ray.get` for the fake node: every call has answered."""

    @staticmethod
    def wait(refs, timeout=None):
        return list(refs), []

    @staticmethod
    def get(ref, timeout=None):
        return list(ref[1])


@pytest.fixture
def driver_rounds(monkeypatch):
    from dmpo.run.distributed import evaluations

    monkeypatch.setattr(evaluations, "ray", AnsweringRay)
    handled: list[tuple[int, int]] = []
    stop = {"asked": False}
    rounds = evaluations.EvaluationRounds(lambda index, row: handled.append((index, row["env_steps"])),
                                          held=lambda: stop["asked"], count=4)
    evaluator = FakeEvaluator()
    rounds.attach(evaluator)
    return rounds, evaluator, handled, stop


def sent_steps(evaluator: FakeEvaluator) -> list[int]:
    return [steps for steps, _, _ in evaluator.requests]


def test_the_driver_sends_the_next_round_only_once_the_previous_row_is_back(driver_rounds):
    rounds, evaluator, handled, _ = driver_rounds
    rounds.request(1000, ["v1000"])
    rounds.request(2000)
    assert evaluator.requests == [(1000, ["v1000"], 0)]  # 2000 waits for 1000's row
    rounds.rows.poll()  # the evaluator has logged nothing yet
    assert sent_steps(evaluator) == [1000] and handled == []
    evaluator.log(1000)
    rounds.rows.poll()  # sends rows(0); this fake answers at once
    rounds.rows.poll()  # collects the row: 2000 goes out
    assert handled == [(0, 1000)]
    assert evaluator.requests == [(1000, ["v1000"], 0), (2000, [], 1)]
    # A resumed run's count goes on from its checkpoint (4 rounds before this start).
    assert (rounds.count, rounds.steps, rounds.last_step) == (6, [1000, 2000], 2000)


def test_a_stop_asked_by_a_callback_on_a_row_holds_the_rounds_queued_and_drops_them(driver_rounds):
    rounds, evaluator, handled, stop = driver_rounds
    rounds.request(1000)
    rounds.request(2000)
    rounds.request(3000)
    evaluator.log(1000)
    stop["asked"] = True  # e.g. --stop-at-return, reached on the row of 1000
    rounds.rows.poll()
    rounds.rows.poll()
    assert handled == [(0, 1000)] and sent_steps(evaluator) == [1000]  # nothing more sent
    rounds.finish(send_queued=False)
    assert sent_steps(evaluator) == [1000] and evaluator.finished_after == 1


def test_a_finished_run_sends_every_round_queued_numbered_in_order(driver_rounds):
    rounds, evaluator, _, _ = driver_rounds
    for steps in (1000, 2000, 3000):
        rounds.request(steps)
    rounds.finish(send_queued=True)
    assert [(steps, number) for steps, _, number in evaluator.requests] == [(1000, 0), (2000, 1), (3000, 2)]
    assert evaluator.finished_after == 3


def test_a_replacement_evaluator_numbers_its_requests_and_rows_from_zero(driver_rounds):
    rounds, evaluator, handled, _ = driver_rounds
    rounds.request(1000)  # sent to the first node, which then dies with its row never logged
    replacement = FakeEvaluator()
    rounds.attach(replacement)
    rounds.request(2000)
    assert replacement.requests == [(2000, [], 0)]  # not held behind the lost round
    replacement.log(2000)
    rounds.rows.poll()
    rounds.rows.poll()
    assert handled == [(0, 2000)]


def test_each_round_carries_its_index_in_the_run_and_whether_it_is_filmed(driver_rounds):
    """The index seeds the round's environment (`evaluation_seed(seed, index)`, as one process seeds
    its evaluation number `index`): a resumed run (4 rounds before) goes on at 4, 5, ..."""
    rounds, evaluator, _, _ = driver_rounds
    rounds.request(100)
    rounds.request(200, film=True)
    rounds.finish(send_queued=True)  # a finished run sends every round queued
    assert evaluator.seeds_and_films == [(4, False), (5, True)]
    assert rounds.count == 6


def test_the_console_prints_each_round_with_the_steps_its_logged_row_holds_after_a_lost_evaluator():
    """The rounds at 500, 1000 and 1500 env steps were asked for; the evaluator was lost during the
    one at 1000 (no row), and its replacement scored the one at 1500. Each line must say what the row in
    logs/evaluator/logs.csv says: the console once paired the replacement's returns with 1000."""
    from dmpo.reporting.progress import Progress
    from dmpo.run.distributed.executor import RayExecutor

    rows = [{"actor_steps": 500, "return_mean": 2.0, "return_std": 1.0},
            {"actor_steps": 1500, "return_mean": 11.0, "return_std": 1.0}]
    program = types.SimpleNamespace(
        config=types.SimpleNamespace(eval_episodes=2), counts={"actor_steps": 1600}, episode_returns=[],
        evaluation_steps=[500, 1000, 1500], evaluation_rows=rows[:1],
        evaluation_returns_since=lambda start: [1.0, 3.0][start:],  # the first evaluator's
        stop=lambda status: types.SimpleNamespace(  # (the replacement's returns come back at the stop)
            status=status, evaluator_returns=[(0, 1.0), (0, 3.0), (1, 10.0), (1, 12.0)], learner={},
            counts={"actor_steps": 1600}))
    lines: list[str] = []
    executor = RayExecutor(types.SimpleNamespace())
    executor.program, executor._program_started = program, True
    executor._bar = Progress(2000, enabled=True, live=False, print_fn=lines.append)
    executor._show()
    program.evaluation_rows = rows  # the replacement's row reached the driver
    program.evaluation_returns_since = lambda start: [10.0, 12.0][start:]
    executor._show()
    executor.interrupted()
    evaluations = [line for line in lines if line.startswith("eval")]
    assert evaluations == ["eval @ 500: 2.0 ± 1.0 over 2 episodes",
                           "eval @ 1,500: 11.0 ± 1.0 over 2 episodes"]
