"""benchmarks/seed_diagnostics.py: per-(run, window) means of the learner log, weak runs marked."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmpo.config import TrainConfig
from dmpo.lifecycle.directory import RunDirectory
from dmpo.reporting.logging import CSVLogger


@pytest.fixture(scope="module")
def diagnostics(benchmark_script):
    return benchmark_script("seed_diagnostics")


def make_run(out: Path, seed: int, returns, temperatures, task="dmc:walker-walk") -> Path:
    path = out / "runs" / "fast" / task.replace(":", "-") / f"seed-{seed}"
    run = RunDirectory.create(path, TrainConfig(env=task, seed=seed, steps=40), seed=seed, command=["dmpo"])
    evaluator = CSVLogger(run.path, "evaluator")
    for i, value in enumerate(returns):
        evaluator.write({"actor_steps": 10 * (i + 1), "return_mean": value, "wall_seconds": i + 1.0})
    evaluator.close()
    learner = CSVLogger(run.path, "learner")
    for i, temperature in enumerate(temperatures):  # one row per 5 env steps
        learner.write({"actor_steps": 5 * (i + 1), "dual_temperature": temperature, "critic/edge_mass": 0.5})
    learner.close()
    return run.path


def test_windows_average_the_learner_log_and_weak_runs_are_marked(diagnostics, tmp_path):
    out = tmp_path / "bench"
    make_run(out, 0, [100, 200, 300, 900], [1.0] * 4 + [3.0] * 4)
    make_run(out, 1, [100, 200, 300, 800], [2.0] * 8)
    make_run(out, 2, [10, 20, 30, 100], [4.0, 6.0] * 4)
    make_run(out, 3, [5, 5, 5, 5], [9.0] * 8, task="dmc:cartpole-swingup")  # another task: left out
    text = diagnostics.diagnostics(diagnostics._runs([out], "dmc:walker-walk"), windows=2, weak=0.7)
    rows = [line for line in text.splitlines() if line.startswith("| fast")]
    assert len(rows) == 6  # 3 runs x 2 windows
    # Mean last evaluation (900 + 800 + 100) / 3 = 600; 0.7x is 420: only seed 2 is below.
    assert "Mean last evaluation 600.0 over 3 runs" in text and "(420.0)" in text
    assert [("⚠" in row) for row in rows] == [False, False, False, False, True, True]
    cells = [row.split(" | ") for row in rows]
    # Window 0-20 of seed 0 holds the rows at steps 5..20 (temperature 1.0); 20-40 the others (3.0).
    assert cells[0][2:5] == ["0–20", "200.0", "1.000"] and cells[1][2:5] == ["20–40", "900.0", "3.000"]
    assert cells[4][4] == "5.000"  # (4 + 6) / 2
    assert cells[0][13] == "0.5000"  # edge mass; columns the log lacks read –
    assert cells[0][5] == "–"


def test_paths_that_are_neither_are_refused(diagnostics, tmp_path):
    with pytest.raises(SystemExit, match="neither a benchmarks/learning.py folder"):
        diagnostics._runs([tmp_path], None)
    with pytest.raises(ValueError, match="no run with an evaluation"):
        diagnostics.diagnostics([], 2, 0.7)
