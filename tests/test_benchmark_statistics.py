"""rliable statistics in the benchmark tables: IQM and mean against closed forms, no interval below 3
seeds, the stratified aggregate across dmc tasks, the performance profile."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rliable")

from benchtools.statistics import aggregate, per_task, plot_performance_profile  # noqa: E402
from images import assert_curves_drawn, colour_pixels  # noqa: E402


def test_per_task_iqm_and_mean_match_closed_forms():
    found = per_task([1.0, 2.0, 3.0, 100.0], reps=500)
    assert found["iqm"].point == pytest.approx(2.5)  # the middle two of four
    assert found["mean"].point == pytest.approx(26.5)
    eight = per_task([8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0], reps=500)
    assert eight["iqm"].point == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    for estimate in (*found.values(), *eight.values()):
        low, high = estimate.interval
        assert low <= estimate.point <= high


def test_too_few_seeds_give_no_interval_and_say_so():
    found = per_task([10.0, 30.0])
    assert found["mean"].point == 20.0 and found["mean"].interval is None
    assert found["mean"].cell() == "20.0 (interval n/a, n=2)"
    same = per_task([4.0, 4.0, 4.0], reps=200)
    assert same["iqm"].interval == (4.0, 4.0)
    with pytest.raises(ValueError, match="finite"):
        per_task([1.0, float("nan")])


def test_aggregate_normalises_dmc_tasks_and_trims_over_all_runs():
    values = {"fast": {
        "dmc:a": {0: 100.0, 1: 200.0, 2: 300.0, 3: 400.0, 9: 0.0},  # seed 9 dropped: 4 seeds per task
        "dmc:b": {0: 500.0, 1: 600.0, 2: 700.0, 3: 800.0},
        "gym:Hopper-v5": {0: 3000.0, 1: 3100.0, 2: 3200.0},  # no stated maximum: left out
    }, "one-task": {"dmc:a": {0: 1.0, 1: 2.0, 2: 3.0}}}
    (row,) = aggregate(values, reps=500)
    assert row.config == "fast" and row.tasks == ("dmc:a", "dmc:b") and row.seeds_per_task == 4
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert row.mean.point == pytest.approx(scores.mean())
    assert row.iqm.point == pytest.approx(np.mean([0.3, 0.4, 0.5, 0.6]))  # 25% cut off each end of 8
    low, high = row.iqm.interval
    # Seeds are resampled within each task, so a resample always holds 4 scores of each task:
    # the IQM cannot fall to the lowest task's scores alone.
    assert 0.2 < low <= row.iqm.point <= high < 0.7


def test_performance_profile_figure(tmp_path):
    values = {"a": {"dmc:x": {0: 100.0, 1: 500.0, 2: 900.0}, "dmc:y": {0: 200.0, 1: 300.0, 2: 400.0}},
              "b": {"dmc:x": {0: 700.0, 1: 800.0, 2: 850.0}}}
    path = plot_performance_profile(values, tmp_path / "profile.png", reps=200)
    assert_curves_drawn(path, ["C0", "C1"])  # a profile for each config
    assert colour_pixels(path, "C2") == 0
    assert plot_performance_profile({"g": {"gym:Hopper-v5": {0: 1.0}}}, tmp_path / "none.png") is None
