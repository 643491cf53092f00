"""The benchmarks' few-seed statistics are the package's own (`dmpo.sweeps.statistics`, used by `dmpo sweep`
too); this name stays for the benchmark scripts and their tests."""

from dmpo.sweeps.statistics import (  # noqa: F401 - re-exported
    MIN_SEEDS,
    Aggregate,
    Estimate,
    aggregate,
    normalise,
    normalised_task,
    per_task,
    plot_performance_profile,
    score_matrix,
)
