"""Learning-benchmark figures (bootstrap interval, normalised AUC), summaries read from run folders,
the results files, and the launcher's planning, scheduling and argument errors — no training."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from benchtools.results import (
    bootstrap_ci,
    normalised_auc,
    plot_benchmark,
    plot_wallclock,
    read_run,
    results_markdown,
    summarise,
    write_results_csv,
)
from dmpo.config import AGENT_PRESETS, DMPOConfig, TrainConfig, control_suite_preset, sample_efficient_preset
from dmpo.lifecycle.directory import RunDirectory
from dmpo.reporting.logging import CSVLogger
from images import assert_curves_drawn, colour_pixels


@pytest.fixture(scope="module")
def learning(benchmark_script):
    return benchmark_script("learning")


# ------------------------------------------------------------------------------------------ bootstrap


def slow_bootstrap(values, resamples, seed, confidence=0.95):
    """Independent reference: draw each resample's indices, average the drawn values one by one."""
    values = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    means = []
    for row in draws:
        total = 0.0
        for index in row:
            total += values[index]
        means.append(total / len(row))
    tail = (1 - confidence) / 2
    return np.quantile(means, tail), np.quantile(means, 1 - tail)


def test_bootstrap_matches_a_slow_reference():
    values = [3.0, -1.5, 7.25, 0.5, 2.0]
    low, high = bootstrap_ci(values, resamples=2000, seed=7)
    ref_low, ref_high = slow_bootstrap(values, 2000, 7)
    np.testing.assert_allclose([low, high], [ref_low, ref_high], rtol=1e-12)
    low90, high90 = bootstrap_ci(values, resamples=2000, seed=7, confidence=0.9)
    np.testing.assert_allclose([low90, high90], slow_bootstrap(values, 2000, 7, 0.9), rtol=1e-12)
    assert low < low90 < high90 < high


def test_bootstrap_columns_use_the_same_resamples_as_one_column():
    samples = np.array([[1.0, 10.0, 5.0], [2.0, 30.0, 5.0], [4.0, 20.0, 5.0]])  # (seeds, points)
    low, high = bootstrap_ci(samples, resamples=500, seed=3)
    assert low.shape == high.shape == (3,)
    for j in range(3):
        column = bootstrap_ci(samples[:, j], resamples=500, seed=3)
        np.testing.assert_allclose([low[j], high[j]], column, rtol=1e-12)
    assert low[2] == high[2] == 5.0  # a point where every seed agrees


def test_identical_seeds_give_a_zero_width_interval_and_one_seed_its_value():
    assert tuple(map(float, bootstrap_ci([4.2, 4.2, 4.2]))) == (pytest.approx(4.2), pytest.approx(4.2))
    assert tuple(map(float, bootstrap_ci([-3.0]))) == (-3.0, -3.0)


def test_interval_holds_the_mean_and_stays_within_the_seeds():
    rng = np.random.default_rng(0)
    for _ in range(20):
        values = rng.normal(size=rng.integers(2, 8)) * 100
        low, high = bootstrap_ci(values, resamples=1000, seed=1)
        assert values.min() <= low <= values.mean() <= high <= values.max()


def test_coverage_is_roughly_right_on_normal_data():
    rng = np.random.default_rng(12345)
    trials, hits = 300, 0
    for trial in range(trials):
        sample = rng.normal(5.0, 2.0, size=25)
        low, high = bootstrap_ci(sample, resamples=2000, seed=trial)
        hits += bool(low <= 5.0 <= high)
    assert 0.88 <= hits / trials <= 0.99  # percentile bootstrap at n=25: a little under 95%


@pytest.mark.parametrize("values, message", [([], "at least one sample"), ([1.0, np.nan], "finite")])
def test_bootstrap_rejects_bad_samples(values, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(values)


def test_bootstrap_rejects_bad_options():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_ci([1.0, 2.0], resamples=0)


# ------------------------------------------------------------------------------------------------ AUC


def test_auc_of_a_line_is_its_midpoint_value_on_any_grid():
    x = np.array([1000.0, 2500.0, 2600.0, 7000.0, 10_000.0])  # uneven spacing
    y = 3.0 + 0.02 * x
    assert normalised_auc(x, y) == pytest.approx(3.0 + 0.02 * (1000 + 10_000) / 2, rel=1e-12)


def test_auc_of_a_piecewise_linear_curve():
    # 0 → 100 over [0, 10], then flat at 100 over [10, 30]: area 500 + 2000 over a span of 30.
    assert normalised_auc([0, 10, 30], [0, 100, 100]) == pytest.approx(2500 / 30)
    assert normalised_auc([5.0], [42.0]) == 42.0
    assert normalised_auc([1, 1], [2.0, 4.0]) == 3.0  # no span: the mean


def test_auc_rejects_bad_curves():
    with pytest.raises(ValueError, match="ascending"):
        normalised_auc([2, 1], [0, 0])
    with pytest.raises(ValueError, match="equal-length"):
        normalised_auc([1, 2], [0])


# --------------------------------------------------------------------------------- synthetic run folders


def make_run(path: Path, *, task: str = "dmc:cartpole-swingup", seed: int = 0, steps: int = 3000,
             returns=(10.0, 20.0, 40.0), every: int = 1000, status: str = "finished",
             seconds: float | None = 60.0, command: list[str] | None = None) -> Path:
    run = RunDirectory.create(path, TrainConfig(env=task, seed=seed, steps=steps), seed=seed,
                              command=command or ["cli.py", "train", "--env", task])
    logger = CSVLogger(run.path, "evaluator")
    for i, value in enumerate(returns):
        logger.write({"actor_steps": every * (i + 1), "evaluator_episodes": i + 1, "return_mean": value})
    logger.close()
    run.set_status(status)
    if seconds is not None:
        run.update_info(start_time="2026-12-03T08:00:00+00:00",
                        end_time=f"2026-12-03T08:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}+00:00")
    return run.path


def test_read_run_takes_the_last_evaluation_and_the_normalised_area(tmp_path):
    path = make_run(tmp_path / "r", seed=4, returns=(10.0, 20.0, 40.0), seconds=90)
    result = read_run(path, "default")
    assert (result.task, result.config, result.seed) == ("dmc:cartpole-swingup", "default", 4)
    assert result.budget == 3000
    assert result.final_return == 40.0
    assert result.auc_return == pytest.approx((15.0 * 1000 + 30.0 * 1000) / 2000)
    assert (result.env_steps, result.evaluations, result.wall_seconds) == (3000, 3, 90.0)
    assert result.env_steps_per_second == pytest.approx(3000 / 90)
    assert read_run(path, "default", wall_seconds=30.0).wall_seconds == 30.0


def test_wall_time_of_a_resumed_run_is_unknown_from_run_json(tmp_path):
    path = make_run(tmp_path / "r")
    RunDirectory.open(path).update_info(resumes=[{"time": "x", "command": []}])
    assert read_run(path, "default").wall_seconds is None


def test_summarise_groups_by_task_and_config(tmp_path):
    finals = {0: 100.0, 1: 300.0, 2: 200.0}
    results = [read_run(make_run(tmp_path / f"a{s}", seed=s, returns=(0.0, v)), "default")
               for s, v in finals.items()]
    untimed = make_run(tmp_path / "b0", seed=0, returns=(5.0, 5.0))
    RunDirectory.open(untimed).update_info(resumes=[{"time": "x", "command": []}])  # wall time unknown
    results.append(read_run(untimed, "reference"))
    # 10,000 resamples: about 370 repeat the highest seed, where 1,000 gave about 37 against the 26 that a
    # 97.5% bound needs, and a different random stream could land under it.
    (default, reference) = summarise(results, resamples=10_000, seed=0)
    assert (default.config, default.seeds) == ("default", (0, 1, 2))
    assert default.final_returns == (100.0, 300.0, 200.0)
    assert default.final_mean == pytest.approx(200.0)
    # With 3 seeds, 1/27 of the resamples repeat one seed (more than 2.5%): the interval is min to max.
    assert default.final_ci == (100.0, 300.0)
    assert default.final_iqm == pytest.approx(200.0)  # a 25% trim of 3 values cuts none
    assert default.auc_mean == pytest.approx(100.0)  # each curve's area is half its final value
    assert default.env_steps_per_second == pytest.approx(3 * 2000 / (3 * 60))
    assert default.minutes_per_100k_steps == pytest.approx(100_000 / (2000 / 60) / 60)
    assert reference.final_ci is None and reference.env_steps_per_second is None  # one seed: no interval
    with pytest.raises(ValueError, match="seed listed twice"):
        summarise([results[0], results[0]])


def test_results_files_and_figure(tmp_path):
    results = [read_run(make_run(tmp_path / f"{task}-{config}-{s}", task=task, seed=s,
                                 returns=(s, 2.0 + s, 5.0)), config)
               for task in ("dmc:cartpole-swingup", "dmc:walker-walk") for config in ("default", "reference")
               for s in (0, 1)]
    summaries = summarise(results, resamples=500)
    write_results_csv(tmp_path / "results.csv", summaries)
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert rows[0].startswith("task,config,n_seeds,seeds,budget,final_mean,final_ci_low")
    assert rows[1].startswith("dmc:cartpole-swingup,default,2,0 1,3000,5.0000,,,")  # 2 seeds: no interval
    text = results_markdown(summaries, preamble=["`the command`"])
    assert text.startswith("`the command`\n\n| task | config |")
    assert "| dmc:walker-walk | reference | 2 (0, 1) | **5.0** | n/a (n=2) | 5.0 | n/a (n=2) |" in text
    assert "final return: IQM | 95% bootstrap CI over seeds |" in text
    groups = {"dmc:cartpole-swingup": {"default": [r.run for r in results[:2]]},
              "dmc:walker-walk": {"default": [r.run for r in results[4:6]], "reference": [results[6].run]}}
    path = plot_benchmark(groups, tmp_path / "fig" / "curves.png", resamples=200)
    assert_curves_drawn(path, ["C0", "C1"])  # default and reference, one colour each on both panels
    assert colour_pixels(path, "C2") == 0
    with pytest.raises(FileNotFoundError, match="evaluator"):
        plot_benchmark({"t": {"c": [tmp_path]}}, tmp_path / "bad.png")


def test_a_run_with_one_evaluation_is_left_out_of_the_averaged_curves(tmp_path):
    # Summarising while a run is under way: its single evaluation shares no range with the others'.
    def run(name: str, walls: tuple[float, ...], returns: tuple[float, ...]) -> Path:
        created = RunDirectory.create(tmp_path / name, TrainConfig(seed=0), seed=0, command=["train"])
        logger = CSVLogger(created.path, "evaluator")
        for i, (wall, value) in enumerate(zip(walls, returns, strict=True)):
            logger.write({"actor_steps": 1000 * (i + 1), "return_mean": value, "wall_seconds": wall})
        logger.close()
        return created.path

    runs = [run("a", (60.0, 120.0, 180.0), (1.0, 2.0, 3.0)), run("b", (66.0, 130.0, 200.0), (1.0, 3.0, 5.0)),
            run("started", (75.0,), (0.5,))]
    groups = {"dmc:cartpole-swingup": {"fast": runs}}
    assert_curves_drawn(plot_benchmark(groups, tmp_path / "steps.png", resamples=100), ["C0"])
    assert_curves_drawn(plot_wallclock(groups, tmp_path / "wall.png", resamples=100), ["C0"])
    only_started = {"dmc:cartpole-swingup": {"fast": runs[2:]}}  # one point, drawn on its own
    assert plot_wallclock(only_started, tmp_path / "one.png", resamples=100).is_file()


def test_runs_that_share_no_wall_clock_stretch_are_left_out_of_the_wall_clock_figure(tmp_path, capsys):
    # A run slowed down by others first evaluates after a fast one's last evaluation: no mean exists.
    def run(name: str, walls: tuple[float, ...]) -> Path:
        created = RunDirectory.create(tmp_path / name, TrainConfig(seed=0), seed=0, command=["train"])
        logger = CSVLogger(created.path, "evaluator")
        for i, wall in enumerate(walls):
            logger.write({"actor_steps": 1000 * (i + 1), "return_mean": float(i), "wall_seconds": wall})
        logger.close()
        return created.path

    fast, slow = run("fast", (60.0, 120.0, 180.0)), run("slow", (600.0, 1200.0, 1800.0))
    steady = [run("a", (60.0, 120.0, 180.0)), run("b", (66.0, 130.0, 200.0))]
    groups = {"dmc:cartpole-swingup": {"apart": [fast, slow], "together": steady}}
    path = plot_wallclock(groups, tmp_path / "wall.png", resamples=100)
    assert_curves_drawn(path, ["C0"])  # the one config drawn takes the first colour
    assert colour_pixels(path, "C1") == 0
    assert "dmc:cartpole-swingup / apart left out" in capsys.readouterr().err
    assert plot_wallclock({"t": {"apart": [fast, slow]}}, tmp_path / "none.png", resamples=100) is None


# ---------------------------------------------------------------------------------------- the script


def test_presets_are_dmpo_trains_own_presets(learning):
    def agent(preset):
        return learning.train_config(learning.PRESETS[preset]).agent

    assert agent("fast") == sample_efficient_preset() == TrainConfig().agent
    assert learning.DEFAULT_PRESET == "fast"
    assert agent("control") == control_suite_preset()
    assert agent("reference") == DMPOConfig()
    assert set(AGENT_PRESETS) <= set(learning.PRESETS)
    # The grid points: each one change to the `fast` of its day, the one its name says. Those measured
    # before the batch of 128 became the default keep the batch of 256 they ran with.
    fast = sample_efficient_preset()
    former = dataclasses.replace(fast, batch_size=256, samples_per_insert=128.0)
    assert agent("fast-b256") == former
    assert agent("fast-n10") == dataclasses.replace(
        former, learner=dataclasses.replace(former.learner, num_samples=10))
    assert agent("fast-lr1e-3") == dataclasses.replace(former, learner=dataclasses.replace(
        former.learner, policy_learning_rate=1e-3, critic_learning_rate=1e-3))
    assert agent("fast-spi256") == dataclasses.replace(
        former, samples_per_insert=256.0,
        networks=dataclasses.replace(former.networks, critic_layer_sizes=(256, 256)))
    assert agent("fast-eps-mean") == dataclasses.replace(former, learner=dataclasses.replace(
        former.learner, mpo=dataclasses.replace(former.learner.mpo, epsilon_mean=0.01)))
    assert agent("fast-b128") == fast
    assert agent("fast-b128-spi128") == dataclasses.replace(former, batch_size=128)


@pytest.mark.parametrize("argv, option", [
    (["--out", "o", "--tasks", "dmc:cartpole-swingup", "--preset", "turbo"], "--preset: unknown preset"),
    (["--out", "o"], "--tasks: give at least one task"),
    (["--out", "o", "--tasks", "cartpole"], "--tasks: ['cartpole'] are not task names"),
    (["--out", "o", "--tasks", "dmc:cartpole-swingup", "--seeds", "1", "1"], "--seeds must be distinct"),
    (["--out", "o", "--tasks", "dmc:cartpole-swingup", "--jobs", "0"], "--jobs must be a positive"),
    (["--out", "o", "--tasks", "dmc:cartpole-swingup", "--", "--steps=5"], "may not set ['--steps=5']"),
    (["--out", "o", "--tasks", "dmc:cartpole-swingup", "--", "--preset", "control"],
     "may not set ['--preset']"),
    (["--out", "o", "--tasks", "dmc:cartpole-swingup", "--threshold", "dmc:cartpole-swingup"],
     "--threshold 'dmc:cartpole-swingup': expected TASK=VALUE"),
])
def test_argument_errors_name_the_option(learning, capsys, tmp_path, monkeypatch, argv, option):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as error:
        learning.main(argv)
    assert error.value.code == 2
    assert option in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing was created


def test_bad_train_flags_fail_before_anything_starts(learning, tmp_path):
    with pytest.raises(SystemExit, match="refuses the flags of --preset fast with the flags after"):
        learning.main(["--out", str(tmp_path / "o"), "--tasks", "dmc:cartpole-swingup", "--",
                       "--agent.batch-size", "0"])
    assert not (tmp_path / "o").exists()


def fake_benchmark(learning, out: Path, seeds=(0, 1)) -> list[str]:
    """Finished runs where `dmpo sweep` puts them: runs/<preset>/env=<task>/seed-<S>."""
    argv = ["--out", str(out), "--tasks", "dmc:cartpole-swingup", "--steps", "3000", "--eval-every", "1500",
            "--eval-episodes", "1", "--seeds", *map(str, seeds)]
    for seed in seeds:
        make_run(out / "runs" / "fast" / "env=dmc_cartpole-swingup" / f"seed-{seed}", seed=seed,
                 returns=(10.0, 50.0 + seed), every=1500)
    return argv


def test_finished_runs_are_skipped_and_summarised(learning, tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench"
    argv = fake_benchmark(learning, out)

    launched = []

    def sweeps_done(out, args, extra):  # stands for `dmpo sweep` finding every run finished
        launched.extend(learning.sweep_command(out, preset, args, extra) for preset in args.preset)
        return 0, []

    monkeypatch.setattr(learning, "run_sweeps", sweeps_done)
    assert learning.main(argv) == 0
    [command] = launched
    assert command[3:8] == ["sweep", str(out / "runs" / "fast"), "--seeds", "0", "1"]
    assert command[8:10] == ["--grid", "env=dmc:cartpole-swingup"]
    assert command[command.index("--") + 1:] == ["--steps", "3000", "--eval-every", "1500", "--eval-episodes",
                                                 "1", "--preset", "fast"]
    table = (out / "results.md").read_text()
    assert "| dmc:cartpole-swingup | fast | 2 (0, 1) | **50.5** |" in table
    assert "benchmarks/learning.py --out" in table  # the command that wrote the table
    assert (out / "results.csv").read_text().count("\n") == 2
    assert (out / "runs.csv").read_text().count("\n") == 3
    assert_curves_drawn(out / "curves.png", ["C0"])  # the one config's curve
    (out / "results.md").unlink()
    assert learning.main(["--out", str(out), "--summarise-only", "--seeds", "1"]) == 0
    assert "| 1 (1) | **51.0** |" in (out / "results.md").read_text()
    make_run(out / "runs" / "reference" / "dmc-cartpole-swingup" / "seed-0", status="running")
    assert learning.main(["--out", str(out), "--summarise-only"]) == 0
    table = (out / "results.md").read_text()
    assert "not finished, left out: reference/dmc-cartpole-swingup/seed-0 (running)" in table
    assert "| dmc:cartpole-swingup | reference | 1 (0) |" not in table
    # Time to score counts the running run too: return 40 at step 3000 reaches a threshold of 30.
    threshold = ["--threshold", "dmc:cartpole-swingup=30"]
    assert learning.main(["--out", str(out), "--summarise-only", *threshold]) == 0
    table = (out / "results.md").read_text()
    assert "| dmc:cartpole-swingup | fast | 30 | 2/2 | 3,000 |" in table
    assert "| dmc:cartpole-swingup | reference | 30 | 1/1 | 3,000 |" in table
    assert "seed 0: 3,000 / ? (running, 3,000)" in table  # no wall_seconds column and no TensorBoard file
    assert (out / "time_to_score.csv").read_text().count("\n") == 4


def test_learning_benchmark_passes_actors_to_dmpo_train(learning):
    """`--actors N` makes every run distributed; without it the run settings (and folders) are unchanged."""
    local, extra = learning.parse_args(["--tasks", "dmc:cartpole-swingup", "--out", "o"])
    assert "--actors" not in learning.train_settings("dmc:cartpole-swingup", 0, local, "fast", extra)
    distributed, extra = learning.parse_args(["--tasks", "dmc:cartpole-swingup", "--actors", "2",
                                              "--out", "o"])
    settings = learning.train_settings("dmc:cartpole-swingup", 0, distributed, "fast", extra)
    assert settings[settings.index("--actors") + 1] == "2"
    with pytest.raises(SystemExit):
        learning.parse_args(["--tasks", "dmc:cartpole-swingup", "--actors", "-1", "--out", "o"])
    with pytest.raises(SystemExit):  # the benchmark sets --actors itself
        learning.parse_args(["--tasks", "dmc:cartpole-swingup", "--out", "o", "--", "--actors", "2"])
