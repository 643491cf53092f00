"""Learning-curve plots: grouping by config up to seeds, smoothing, interpolation/spread, PNG, errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dmpo.config import DMPOConfig, LearnerConfig
from dmpo.lifecycle.directory import RunDirectory
from dmpo.reporting.logging import CSVLogger
from dmpo.reporting.plotting import (
    Curve,
    _short_names,
    aggregate_curves,
    group_runs,
    load_curve,
    plot_figure,
    plot_runs,
    smooth,
    spanning_curves,
)
from images import assert_curves_drawn, colour_pixels


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    env: str = "dmc:cartpole-swingup"
    steps: int = 2000
    agent: DMPOConfig = dataclasses.field(default_factory=DMPOConfig)


def make_run(root: Path, name: str, discount: float, seed: int, *, steps_key: str = "actor_steps",
             offset: float = 0.0, n: int = 20, budget: int = 2000) -> Path:
    config = TrainConfig(seed=seed, steps=budget, agent=DMPOConfig(learner=LearnerConfig(discount=discount)))
    run = RunDirectory.create(root / name, config, seed=seed)
    logger = CSVLogger(run.path, "evaluator")
    for i in range(n):
        logger.write({steps_key: 100 * i + 7 * seed, "episode_return": offset + i + seed})
    logger.close()
    return run.path


@pytest.fixture
def four_runs(tmp_path) -> list[Path]:
    return [make_run(tmp_path, f"{d}-{s}", d, s, offset=10.0 * (d == 0.9))
            for d in (0.9, 0.99) for s in (0, 1)]


def test_plot_runs_writes_a_png(four_runs, tmp_path):
    output = plot_runs(four_runs, tmp_path / "plots" / "curve.png", smoothing=3)
    # Two groups: a curve in each of the first two colours of the cycle, none in a third.
    assert_curves_drawn(output, ["C0", "C1"])
    assert colour_pixels(output, "C2") == 0
    output_std = plot_runs(four_runs, tmp_path / "std.png", spread="std", label_source="evaluator")
    assert_curves_drawn(output_std, ["C0", "C1"])


def test_default_grouping_ignores_seeds_and_labels_by_difference(four_runs):
    groups = group_runs(four_runs)
    assert groups == {"discount=0.9": four_runs[:2], "discount=0.99": four_runs[2:]}
    assert group_runs(four_runs[:2]) == {"all runs": four_runs[:2]}


def texts(figure):
    (axes,) = figure.axes
    (legend,) = figure.legends
    return (axes.get_title(), axes.get_xlabel(), axes.get_ylabel(), legend.get_title().get_text(),
            [text.get_text() for text in legend.get_texts()])


def test_figure_names_task_band_and_groups(four_runs, tmp_path):
    from matplotlib.collections import PolyCollection

    longer = make_run(tmp_path, "0.9-2-longer", 0.9, 2, budget=4000)  # another --steps: same group
    figure = plot_figure([*four_runs, longer], smoothing=3, spread="ci95")
    title, x_label, y_label, legend_title, labels = texts(figure)
    assert title == "dmc:cartpole-swingup: episode_return (evaluator)"
    assert (x_label, y_label) == ("actor_steps", "episode_return, mean of the last 3 points")
    assert legend_title == "shaded: 95% CI of the mean (t) over runs"
    assert labels == ["discount=0.9: mean of 3 runs", "discount=0.99: mean of 2 runs"]
    (axes,) = figure.axes
    assert len(axes.lines) == 2 and sum(isinstance(c, PolyCollection) for c in axes.collections) == 2

    figure = plot_figure(four_runs[:2], spread="minmax", per_seed=True)
    title, _, y_label, legend_title, labels = texts(figure)
    assert y_label == "episode_return" and labels == ["all runs: mean of 2 runs"]
    assert legend_title == "shaded: min–max over runs; thin lines: single runs"
    (axes,) = figure.axes
    assert len(axes.lines) == 3  # the mean and each run's own curve
    np.testing.assert_allclose(axes.lines[1].get_ydata(), 10.0 + np.arange(20.0))  # seed 0, as logged

    title, *_, legend_title, labels = texts(plot_figure(four_runs[:1], spread="std", title="mine"))
    assert title == "mine" and legend_title == "" and labels == ["all runs: 0.9-0"]


def test_ci95_band_is_students_t_interval():
    a = Curve(Path("a"), np.array([0.0, 1.0]), np.array([0.0, 0.0]), "steps")
    b = Curve(Path("b"), np.array([0.0, 1.0]), np.array([2.0, 2.0]), "steps")
    _, mean, low, high = aggregate_curves([a, b], num_points=2, spread="ci95")
    # n = 2: sample std sqrt(2), t(0.975, 1) = 12.7062 (tables), half width 12.7062 * sqrt(2) / sqrt(2)
    np.testing.assert_allclose(mean, 1.0)
    np.testing.assert_allclose(high - mean, 12.7062, rtol=1e-5)
    np.testing.assert_allclose(mean - low, 12.7062, rtol=1e-5)


def test_legend_names_are_short_unless_ambiguous():
    names = ["config.agent.learner.discount", "config.agent.learner.mpo.epsilon", "config.agent.n_step",
             "config.agent.learner.n_step"]
    assert _short_names(names) == {"config.agent.learner.discount": "discount",
                                   "config.agent.learner.mpo.epsilon": "epsilon",
                                   "config.agent.n_step": "agent.n_step",
                                   "config.agent.learner.n_step": "agent.learner.n_step"}


def test_grouping_by_field_or_function(four_runs, tmp_path):
    by_field = group_runs(four_runs, "config.seed")
    assert by_field == {"seed=0": [four_runs[0], four_runs[2]], "seed=1": [four_runs[1], four_runs[3]]}
    by_name = group_runs(four_runs, lambda run: run.name.split("-")[1])
    assert list(by_name) == ["0", "1"]
    with pytest.raises(KeyError, match="no field 'config.sed'"):
        group_runs(four_runs, "config.sed")
    bare = tmp_path / "bare"
    bare.mkdir()
    assert group_runs([bare]) == {"bare": [bare]}  # no config.json: its own group, named by folder


def test_smooth_is_a_trailing_mean():
    values = np.array([1.0, 5.0, 2.0, 8.0, 3.0])
    expected = [np.mean(values[max(0, i - 2): i + 1]) for i in range(len(values))]
    np.testing.assert_allclose(smooth(values, 3), expected)
    np.testing.assert_array_equal(smooth(values, 1), values)
    with pytest.raises(ValueError, match="smoothing window"):
        smooth(values, 0)


def test_aggregate_interpolates_onto_the_common_range():
    a = Curve(Path("a"), np.array([0.0, 10.0]), np.array([0.0, 10.0]), "steps")  # y = x
    b = Curve(Path("b"), np.array([2.0, 6.0, 12.0]), np.array([4.0, 8.0, 14.0]), "steps")  # y = x + 2
    grid, mean, low, high = aggregate_curves([a, b], num_points=9)
    np.testing.assert_allclose(grid, np.linspace(2.0, 10.0, 9))
    np.testing.assert_allclose(mean, grid + 1)
    np.testing.assert_allclose(low, grid)
    np.testing.assert_allclose(high, grid + 2)
    _, mean, low, high = aggregate_curves([a, b], num_points=9, spread="std")
    np.testing.assert_allclose(high - mean, 1.0)
    np.testing.assert_allclose(mean - low, 1.0)
    c = Curve(Path("c"), np.array([11.0, 12.0]), np.array([0.0, 1.0]), "steps")
    with pytest.raises(ValueError, match="share no x range"):
        aggregate_curves([a, c])


def test_load_curve_sorts_and_skips_blank_cells(tmp_path):
    path = tmp_path / "logs" / "evaluator" / "logs.csv"
    path.parent.mkdir(parents=True)
    path.write_text("actor_steps,episode_return,note\n20,2.0,x\n10,1.0,\n30,,y\nnan,5,z\n")
    curve = load_curve(tmp_path)
    np.testing.assert_array_equal(curve.x, [10.0, 20.0])
    np.testing.assert_array_equal(curve.y, [1.0, 2.0])


def test_missing_column_and_log_errors_name_the_file(four_runs, tmp_path):
    csv_path = four_runs[0] / "logs" / "evaluator" / "logs.csv"
    with pytest.raises(ValueError, match=r"logs\.csv: no column 'loss'; columns are \['actor_steps', "
                                         r"'episode_return'\]") as info:
        plot_runs(four_runs, tmp_path / "x.png", y="loss")
    assert str(csv_path) in str(info.value)
    with pytest.raises(FileNotFoundError, match=r"no 'learner' log at .*logs found: \['evaluator'\]"):
        plot_runs(four_runs, tmp_path / "x.png", label_source="learner")
    assert not (tmp_path / "x.png").exists()


def test_x_falls_back_to_a_step_column(tmp_path):
    runs = [make_run(tmp_path, f"r{s}", 0.99, s, steps_key="evaluator_steps") for s in (0, 1)]
    with pytest.warns(UserWarning, match="using 'evaluator_steps' as x"):
        plot_runs(runs, tmp_path / "p.png")
    assert_curves_drawn(tmp_path / "p.png", ["C0"])  # one group: both seeds averaged
    mixed = [runs[0], make_run(tmp_path, "other", 0.99, 2)]
    with pytest.raises(ValueError, match="different x columns"), pytest.warns(UserWarning):
        plot_runs(mixed, tmp_path / "q.png")


def test_a_run_with_one_evaluation_is_drawn(tmp_path):
    run = make_run(tmp_path, "one", 0.99, 0, n=1)
    output = plot_runs([run], tmp_path / "one.png", label_source="evaluator")
    # A one-point line draws nothing: only the legend's short line would be in the first colour
    # (about 30 pixels); the point's marker in the axes and in the legend make several times that.
    assert colour_pixels(output, "C0") > 100


def test_a_seed_with_one_evaluation_beside_others_is_left_out_of_the_mean(tmp_path):
    # Plotting a sweep while its last seed has logged one evaluation: that point shares no x range.
    a = Curve(Path("a"), np.array([0.0, 10.0]), np.array([0.0, 10.0]), "steps")  # y = x
    b = Curve(Path("b"), np.array([0.0, 10.0]), np.array([2.0, 12.0]), "steps")  # y = x + 2
    started = Curve(Path("started"), np.array([5.0]), np.array([100.0]), "steps")
    grid, mean, low, high = aggregate_curves([a, b, started], num_points=3)
    np.testing.assert_allclose(grid, [0.0, 5.0, 10.0])
    np.testing.assert_allclose(mean, grid + 1)  # 100.0 would pull the mean far up
    np.testing.assert_allclose(high, grid + 2)
    runs = [make_run(tmp_path, "s0", 0.99, 0), make_run(tmp_path, "s1", 0.99, 1),
            make_run(tmp_path, "s2", 0.99, 2, n=1)]
    figure = plot_figure(runs, per_seed=True)
    legend = figure.legends[0] if figure.legends else figure.axes[0].get_legend()
    assert [text.get_text() for text in legend.get_texts()][0].endswith("mean of 2 runs")
    assert spanning_curves([started]) == [started]  # alone, a single point is still drawn
