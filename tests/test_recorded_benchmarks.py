"""benchmarks/recorded.py: recorded curves restated with the tool's rliable statistics (the result
pages under docs/results/ show what it prints; tests/test_results_pages.py holds them to it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchtools.time_to_score import time_to_score_markdown

_ROOT = Path(__file__).resolve().parent.parent
_DATA = _ROOT / "benchmarks" / "recorded" / "presets-3seeds-100k.json"


@pytest.fixture(scope="module")
def recorded(benchmark_script):
    return benchmark_script("recorded")


@pytest.fixture(scope="module")
def data():
    return json.loads(_DATA.read_text(encoding="utf-8"))


def test_results_are_rebuilt_from_the_curves(recorded, data):
    results = recorded.recorded_results(data)
    assert len(results) == sum(len(g["curves"]) for g in data["groups"]) == 24
    walker_fast = next(g for g in data["groups"] if (g["task"], g["config"]) == ("dmc:walker-walk", "fast"))
    seed_2 = next(r for r in results if (r.task, r.config, r.seed) == ("dmc:walker-walk", "fast", 2))
    curve = np.array(walker_fast["curves"]["2"], dtype=float)
    steps = np.arange(1, 11) * 10_000.0
    # The area by hand: trapezoids over 10k..100k, divided by the 90k span.
    by_hand = sum((curve[i] + curve[i + 1]) / 2 * 10_000 for i in range(9)) / 90_000
    assert seed_2.final_return == 480.0 and seed_2.auc_return == pytest.approx(by_hand)
    assert seed_2.env_steps_per_second == pytest.approx(67.8) and steps[-1] == seed_2.budget

    broken = json.loads(json.dumps(data))
    broken["groups"][0]["curves"]["0"] = broken["groups"][0]["curves"]["0"][:-1]
    with pytest.raises(ValueError, match="cartpole-swingup / control seed 0: curves must have one return"):
        recorded.recorded_results(broken)


def _table_rows(text: str) -> list[str]:
    starts = ("| dmc:", "| gym:", "| control |", "| fast |")
    return [line for line in text.splitlines() if line.startswith(starts)]


def test_the_tables_restate_the_recorded_finals(recorded, data):
    text = recorded.tables(data, resamples=2_000)  # enough for the intervals asserted; 10,000 took 15 s
    rows = _table_rows(text)
    assert len(rows) == 8 + 2
    # Three seeds: a 95% bootstrap interval of the mean runs from the lowest seed to the highest.
    assert "| dmc:walker-walk | fast | 3 (0, 1, 2) | **776.2** | [480.0, 944.7] |" in text


_EVERY_POINT = ["presets-3seeds-100k.json", "preset-grid-100k.json", "fast-seeds34-100k.json",
                "walker-grid-60k.json", "fast-spi256-50k.json"]


def test_the_five_seed_and_time_to_score_tables_cover_every_preset_tried(recorded):
    """The 5-seed table of the default and the time-to-score table of every preset tried."""
    files = [json.loads((_DATA.parent / name).read_text(encoding="utf-8")) for name in _EVERY_POINT]
    five = _table_rows(recorded.tables(recorded.pooled([files[0], files[2]]), resamples=2_000))
    assert sum(1 for row in five if "| fast | 5 (0, 1, 2, 3, 4) |" in row) == 3  # the three dmc tasks
    times = _table_rows(time_to_score_markdown(recorded.recorded_times(files)))
    configs = {row.split(" | ")[1] for row in times}
    assert {"fast", "control", "reference", "fast-n10", "fast-lr1e-3", "fast-spi256", "fast-eps-mean",
            "control-spi64", "fast-critic512", "fast-lr1e-4"} <= configs


def test_time_to_score_reads_measured_minutes_and_estimates_the_rest(recorded):
    data = {"budget": 40, "eval_every": 10, "groups": [
        {"task": "dmc:walker-walk", "config": "a", "env_steps_per_second": 2.0,
         "curves": {"0": [100, 750, 650, 800], "1": [100, 200, 701, 900], "2": [1, 2, 3, 4]},
         "wall_minutes": {"0": [1.0, 2.5, 4.0, 5.0]}},
        {"task": "dmc:walker-walk", "config": "short", "budget": 60, "env_steps_per_second": 1.0,
         "curves": {"0": [10, 720]}},
        {"task": "gym:Hopper-v5", "config": "a", "env_steps_per_second": 1.0, "curves": {"0": [1, 2, 3, 4]}},
    ]}
    rows = {(r.config, r.seed): r for r in recorded.recorded_times([data], {"dmc:walker-walk": 700.0})}
    assert set(rows) == {("a", 0), ("a", 1), ("a", 2), ("short", 0)}  # no threshold for Hopper: left out
    # Seed 0: measured, first evaluation at or above 700 is the second (750 at 20 steps, 2.5 min).
    assert rows["a", 0].reached == (20, 150.0) and rows["a", 0].source == "log"
    # Seed 1: no wall_minutes, so 30 steps at the group's 2 env steps/s.
    assert rows["a", 1].reached == (30, 15.0) and rows["a", 1].source == "estimate"
    assert rows["a", 2].reached is None and rows["a", 2].status == "finished"
    # A group's own budget: 20 of its 60 steps recorded, so the run is unfinished.
    assert (rows["short", 0].status, rows["short", 0].last_env_steps) == ("unfinished", 20)
    table = time_to_score_markdown(list(rows.values()))
    assert "| dmc:walker-walk | a | 700 | 2/3 | 30 | ≈2.5 |" in table  # estimated seed present: ≈
    assert "seed 0: 20 / 2.5 (40); seed 1: 30 / ≈0.2 (40); seed 2: – (40)" in table


def test_record_folder_reads_a_benchmark_folder_back(recorded, tmp_path):
    from dmpo.config import TrainConfig
    from dmpo.lifecycle.directory import RunDirectory
    from dmpo.reporting.logging import CSVLogger

    def run(seed, steps, returns):
        config = TrainConfig(env="dmc:walker-walk", seed=seed, steps=30, eval_every=10)
        path = tmp_path / "out" / "runs" / "fast" / "dmc-walker-walk" / f"seed-{seed}"
        directory = RunDirectory.create(path, config, seed=seed, command=["dmpo", "train"])
        logger = CSVLogger(directory.path, "evaluator")
        for step, value in zip(steps, returns, strict=True):
            logger.write({"actor_steps": step, "return_mean": value, "wall_seconds": step * 6.0})
        logger.close()

    run(3, [10, 20, 30], [100.04, 720.0, 800.0])
    run(4, [10, 20], [50.0, 60.0])  # still running
    every, groups = recorded.record_folder(tmp_path / "out", "abc1234")
    assert every == 10 and len(groups) == 1
    group = groups[0]
    assert (group["task"], group["config"], group["commit"], group["budget"]) == (
        "dmc:walker-walk", "fast", "abc1234", 30)
    assert group["curves"] == {"3": [100.0, 720.0, 800.0], "4": [50.0, 60.0]}
    assert group["wall_minutes"] == {"3": [1.0, 2.0, 3.0], "4": [1.0, 2.0]}
    assert group["env_steps_per_second"] == pytest.approx((30 + 20) / (180 + 120), abs=0.05)
    rows = recorded.recorded_times([{"budget": 30, "eval_every": 10, "groups": groups}])
    assert {r.seed: (r.reached, r.status) for r in rows} == {3: ((20, 120.0), "finished"),
                                                             4: (None, "unfinished")}

    run(5, [10, 25], [1.0, 2.0])  # an evaluation off the grid cannot be a recorded curve
    with pytest.raises(ValueError, match="seed-5: evaluations at"):
        recorded.record_folder(tmp_path / "out", "abc1234")
    with pytest.raises(SystemExit) as error:  # the command says it in one line
        recorded.main(["--record", str(tmp_path / "out")])
    assert error.value.code == 2
    with pytest.raises(SystemExit) as error:
        recorded.main([str(tmp_path / "missing.json")])
    assert error.value.code == 2


def test_files_pool_only_with_one_budget(recorded, data):
    other = {**data, "budget": 60_000}
    with pytest.raises(ValueError, match="one budget and eval_every"):
        recorded.pooled([data, other])
    assert len(recorded.pooled([data, data])["groups"]) == 2 * len(data["groups"])


def test_only_seeds_keeps_those_seeds_curves_and_minutes_in_every_group(recorded, capsys):
    data = {"budget": 20, "eval_every": 10, "groups": [
        {"task": "dmc:walker-walk", "config": "a", "env_steps_per_second": 1.0,
         "curves": {"0": [1.0, 2.0], "1": [3.0, 4.0], "2": [5.0, 6.0]},
         "wall_minutes": {"0": [0.1, 0.2], "1": [0.3, 0.4], "2": [0.5, 0.6]}},
        {"task": "dmc:walker-walk", "config": "b", "env_steps_per_second": 1.0,
         "curves": {"0": [7.0, 8.0], "2": [9.0, 10.0]}}]}
    cut = recorded.only_seeds(data, [0, 2])
    assert [g["curves"] for g in cut["groups"]] == [{"0": [1.0, 2.0], "2": [5.0, 6.0]},
                                                    {"0": [7.0, 8.0], "2": [9.0, 10.0]}]
    assert cut["groups"][0]["wall_minutes"] == {"0": [0.1, 0.2], "2": [0.5, 0.6]}
    assert "wall_minutes" not in cut["groups"][1]
    assert data["groups"][0]["curves"].keys() == {"0", "1", "2"}  # the file read is left as it was
    with pytest.raises(ValueError, match=r"dmc:walker-walk / b: none of seeds \[1\] recorded"):
        recorded.only_seeds(data, [1])
