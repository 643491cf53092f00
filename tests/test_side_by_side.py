"""benchmarks/side_by_side.py: the metrics and the table, on hand-made runs (no training)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def side_by_side(benchmark_script):
    return benchmark_script("side_by_side")


@pytest.fixture
def metrics(side_by_side):
    import benchtools.side_by_side_metrics as metrics
    return metrics


def episodes(returns, steps_per_episode=1000, seconds_per_episode=30.0):
    return [{"env_steps": steps_per_episode * (i + 1), "return": r, "seconds": seconds_per_episode * (i + 1)}
            for i, r in enumerate(returns)]


def test_moving_mean_counts_only_full_windows_and_crosses_at_a_known_episode(metrics):
    # One lucky early episode (900) is not enough: the first full window's mean is (900 + 9·100)/10 = 180.
    # From episode 11 on every return is 1000; the window ending at episode k holds k-10 of them, so its
    # mean is first ≥ 800 when 100·(20-k) + 1000·(k-10) ≥ 8000, i.e. k ≥ 17.78: episode 18.
    returns = [900] + [100] * 9 + [1000] * 10
    means = metrics.moving_mean(episodes(returns))
    assert len(means) == 11
    assert means[0] == {"env_steps": 10_000, "return": pytest.approx(180.0), "seconds": 300.0}
    run = {"threshold": 800.0, "status": "reached", "evaluations": None, "episodes": episodes(returns)}
    reached = metrics.run_metric(run, metrics.TRAINING_MEAN)
    assert reached == metrics.Reached(18_000, 18 * 30.0 / 60.0)
    assert metrics.run_metric(run, metrics.EVALUATION) is None
    assert not metrics.metric_available(run, metrics.EVALUATION)
    assert metrics.all_reached(run)


def test_capped_run_gives_a_lower_bound_and_an_exited_one_none(metrics):
    run = {"threshold": 800.0, "status": "cap: max minutes", "env_steps": 42_000, "seconds": 600.0,
           "evaluations": [{"env_steps": 10_000, "return": 500.0, "seconds": 200.0},
                           {"env_steps": 20_000, "return": 799.9, "seconds": 400.0}],
           "episodes": None}
    assert metrics.run_metric(run, metrics.EVALUATION) == metrics.Reached(42_000, 10.0, lower_bound=True)
    assert not metrics.all_reached(run)
    cell = metrics.reached_cell(metrics.run_metric(run, metrics.EVALUATION), True)
    assert cell == "> 10.0 min (> 42,000 steps)"
    assert metrics.run_metric({**run, "status": "failed (exit 1)"}, metrics.EVALUATION) is None
    assert metrics.reached_cell(None, False) == "n/a"


def test_medians_and_ratios(metrics):
    r = metrics.Reached
    assert metrics.median_reached([r(10, 2.0), r(30, 6.0), r(20, 4.0)]) == r(20, 4.0)
    # A capped seed below the median could move it up: the median is then a lower bound too.
    assert metrics.median_reached([r(10, 2.0, True), r(30, 6.0), r(20, 4.0)]).lower_bound
    assert not metrics.median_reached([r(10, 2.0), r(30, 6.0, True), r(20, 4.0)]).lower_bound
    assert metrics.median_reached([r(10, 2.0), None]) is None
    assert metrics.ratio_cell(r(0, 9.0), r(0, 3.0)) == "3.00"
    assert metrics.ratio_cell(r(0, 9.0, True), r(0, 3.0)) == "≥ 3.00"
    assert metrics.ratio_cell(r(0, 9.0, True), r(0, 3.0, True)) == "n/a (dmpo capped)"
    assert metrics.ratio_cell(None, r(0, 3.0)) == "n/a"


def test_table_from_recorded_runs(side_by_side, tmp_path):
    dmpo = {"kind": "dmpo", "seed": 0, "threshold": 800.0, "status": "reached", "env_steps": 20_000,
            "seconds": 240.0, "load_start": 1.0, "load_end": 2.0, "command": "dmpo train",
            "evaluations": [{"env_steps": 20_000, "return": 850.0, "seconds": 240.0}],
            "episodes": episodes([820.0] * 20, seconds_per_episode=12.0)}
    acme = {"kind": "acme", "seed": 0, "threshold": 800.0, "status": "cap: max minutes", "env_steps": 30_000,
            "seconds": 1200.0, "load_start": 1.0, "load_end": 2.0, "command": "acme train",
            "evaluations": None, "episodes": episodes([100.0] * 30, seconds_per_episode=40.0)}
    sac = {"kind": "sac", "seed": 0, "threshold": 800.0, "status": "reached", "env_steps": 30_000,
           "seconds": 720.0, "load_start": 1.0, "load_end": 2.0, "command": "sac",
           "evaluations": [{"env_steps": 30_000, "return": 810.0, "seconds": 720.0}], "episodes": None}
    tqc = {**sac, "kind": "tqc", "command": "tqc", "seconds": 1000.0,
           "evaluations": [{"env_steps": 20_000, "return": 790.0, "seconds": 600.0},
                           {"env_steps": 30_000, "return": 805.0, "seconds": 960.0}]}
    results = {"task": "dmc:cartpole-swingup", "threshold": 800.0, "updated": "now", "commit": "abc",
               "machine": "cpu, 2 cores", "max_steps": 500_000, "max_minutes": 20.0,
               "runs": [dmpo, acme, sac, tqc]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    side_by_side.main(["--out", str(tmp_path), "--summarise-only"])
    table = (tmp_path / "results.md").read_text()
    # dmpo: (a) at 4.0 min, (b) the 10th episode (10,000 steps, 2.0 min); Acme capped at 20 min; SAC 12 min;
    # TQC's first evaluation (790) is below the threshold, its second (960 s = 16 min) reaches it.
    assert "| dmpo | 0 | 83 | 4.0 min @ 20,000 steps | 2.0 min @ 10,000 steps | reached |" in table
    assert "| acme | 0 | 25 | n/a | > 20.0 min (> 30,000 steps) | cap: max minutes |" in table
    assert "| dmpo | (b) | acme | ≥ 10.00 |" in table
    assert "| dmpo | (a) | sac | 3.00 |" in table
    assert "| tqc | 1 | 16.0 min @ 30,000 steps | n/a |" in table
    assert "| dmpo | (a) | tqc | 4.00 |" in table
    assert "| dmpo | (b) | tqc |" not in table  # TQC prints no training returns


def test_acme_runs_other_tasks_through_the_wrapper_which_sets_only_the_task(side_by_side, tmp_path):
    import subprocess
    import sys

    # A stand-in for the peer's bench.py: the two globals the wrapper sets, and a main that reports them.
    peer = tmp_path / "bench.py"
    peer.write_text("DOMAIN, TASK = 'cartpole', 'swingup'\n"
                    "def main(argv=None):\n"
                    "    print('built', DOMAIN, TASK, 'with', argv)\n")
    args = side_by_side.parse_arguments(["--task", "dmc:walker-walk", "--out", str(tmp_path), "--seeds", "3",
                                         "--max-steps", "5000", "--acme-python", sys.executable,
                                         "--acme-script", str(peer), "--runs", "acme"])
    command, _ = side_by_side.run_command("acme", 3, args, tmp_path / "run")
    assert command[:3] == ["nice", "-n", "10"]
    done = subprocess.run(command[3:], capture_output=True, text=True, check=True)
    assert "built walker walk with ['train', '--steps', '5000', '--seed', '3']" in done.stdout
    # On its own task the peer script runs as it is, without the wrapper.
    args.task = "dmc:cartpole-swingup"
    command, _ = side_by_side.run_command("acme", 3, args, tmp_path / "run")
    assert command[3:5] == [sys.executable, str(peer)]


def test_peer_paths_come_from_flags_or_the_environment_never_a_default(side_by_side, tmp_path, monkeypatch):
    for variable in ("DMPO_BENCH_ACME_PYTHON", "DMPO_BENCH_ACME_SCRIPT", "DMPO_BENCH_SAC_PYTHON",
                     "DMPO_BENCH_SAC_SCRIPT"):
        monkeypatch.delenv(variable, raising=False)
    base = ["--task", "dmc:walker-walk", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as error:  # a peer run with no path to its environment: one line, exit 2
        side_by_side.parse_arguments([*base, "--runs", "dmpo", "sac"])
    assert error.value.code == 2
    assert side_by_side.parse_arguments([*base, "--runs", "dmpo"]).sac_python is None  # dmpo alone needs none
    monkeypatch.setenv("DMPO_BENCH_SAC_PYTHON", "/opt/sac/bin/python")
    monkeypatch.setenv("DMPO_BENCH_SAC_SCRIPT", "sac_dmc.py")
    args = side_by_side.parse_arguments([*base, "--runs", "sac"])
    assert side_by_side.run_command("sac", 0, args, tmp_path / "run")[0][3:7] == ["/opt/sac/bin/python",
                                                                               "sac_dmc.py", "walker-walk",
                                                                               "--algo"]
    # TQC runs from the SAC peer's environment and script, which picks the SBX class by --algo.
    monkeypatch.delenv("DMPO_BENCH_SAC_PYTHON")
    with pytest.raises(SystemExit) as error:
        side_by_side.parse_arguments([*base, "--runs", "tqc"])
    assert error.value.code == 2
    monkeypatch.setenv("DMPO_BENCH_SAC_PYTHON", "/opt/sac/bin/python")
    args = side_by_side.parse_arguments([*base, "--runs", "dmpo", "tqc"])
    command = side_by_side.run_command("tqc", 2, args, tmp_path / "run")[0]
    assert command[3:8] == ["/opt/sac/bin/python", "sac_dmc.py", "walker-walk", "--algo", "tqc"]
    assert command[command.index("--seed") + 1] == "2"
