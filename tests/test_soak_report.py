"""The chaos soak's RSS figures (benchmarks/soak_report.py) on constructed samples whose answers are
known by hand: a process that steps from 100 to 110 MiB grew by 10% over its life and not at all
after the step; a process too short-lived is not judged; steps at the faults are counted at them."""

from __future__ import annotations


def samples(name: str, pid: int, start: int, end: int, rss) -> list[list]:
    """One sample every 10 s from `start` to `end` seconds, RSS given by `rss(seconds)`."""
    return [[float(t), name, pid, float(rss(t))] for t in range(start, end + 1, 10)]


def test_growth_over_a_life_and_after_the_last_fault(benchmark_script):
    report = benchmark_script("soak_report")
    stepping = samples("gcs_server", 1, 0, 1800, lambda t: 100 if t < 900 else 110)
    short = samples("ray::LearnerNode", 2, 1200, 1800, lambda t: 500 + t)  # 600 s: too short to judge
    lives = report.process_growth(stepping + short, last_fault=1000.0, warmup=300.0, least=900.0)
    assert lives["gcs_server"] == {"processes": 1, "life": [100.0, 110.0, 0.1],
                                   "after_faults": [110.0, 110.0, 0.0]}
    assert lives["ray::LearnerNode"]["processes"] == 0 and lives["ray::LearnerNode"]["life"] is None


def test_growth_at_faults_is_told_from_growth_between_them(benchmark_script):
    report = benchmark_script("soak_report")
    # +5 MiB right at each of two faults (600 s, 1200 s), +2 MiB at 900 s between them.
    rss = samples("gcs_server", 1, 0, 1800, lambda t: 50 + 5 * (t >= 600) + 2 * (t >= 900) + 5 * (t >= 1200))
    faults = [{"seconds": 600.0}, {"seconds": 1200.0}]
    assert report.growth_at_faults(rss, faults) == [10.0, 2.0]
    # A fault sooner than 2 minutes after the previous one ends that one's span: nothing counted twice.
    close = samples("gcs_server", 1, 0, 1800, lambda t: 50 + 5 * (t >= 600) + 5 * (t >= 690))
    assert report.growth_at_faults(close, [{"seconds": 600.0}, {"seconds": 690.0}]) == [10.0, 0.0]


def test_the_table_says_whether_the_final_lies_in_the_undisturbed_range(benchmark_script):
    report = benchmark_script("soak_report")
    finals = [{"final": {"return_mean": value}, "status": "finished"} for value in (-160, -120)]
    result = {"final": {"return_mean": -150.0}, "undisturbed": finals}
    assert report.within_range(result) == "yes (-150.0 in [-160.0, -120.0])"
    result["final"]["return_mean"] = -170.0
    assert report.within_range(result) == "no, below (-170.0 in [-160.0, -120.0])"
