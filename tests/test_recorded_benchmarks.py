"""benchmarks/recorded.py: recorded curves restated with the tool's rliable statistics, and BENCHMARKS.md
holding exactly what it prints."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parent.parent
_DATA = _ROOT / "benchmarks" / "recorded" / "issue13-100k.json"


@pytest.fixture(scope="module")
def recorded():
    spec = importlib.util.spec_from_file_location("benchmark_recorded", _ROOT / "benchmarks" / "recorded.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    with pytest.raises(ValueError, match="cartpole-swingup / default seed 0: curves must have one return"):
        recorded.recorded_results(broken)


def test_benchmarks_md_holds_the_tables_the_script_prints(recorded, data):
    text = recorded.tables(data)
    rows = [line for line in text.splitlines() if line.startswith("| dmc:") or line.startswith("| gym:")
            or line.startswith("| default |") or line.startswith("| fast |")]
    assert len(rows) == 8 + 2
    # Three seeds: a 95% bootstrap interval of the mean runs from the lowest seed to the highest.
    assert "| dmc:walker-walk | fast | 3 (0, 1, 2) | **776.2** | [480.0, 944.7] |" in text
    benchmarks = (_ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    missing = [row for row in rows if row not in benchmarks]
    assert not missing, f"BENCHMARKS.md lacks rows benchmarks/recorded.py prints: {missing}"
