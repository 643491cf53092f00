"""`dmpo sweep`: many `dmpo train` runs (seeds, grids, an Optuna search) as Ray Tune trials.

`spec` reads the sweep's flags, `trial` is the Tune trainable that drives one run directory, `runner`
runs the Tune experiment on a Ray cluster, `results` writes the results table and `statistics` holds the
few-seed statistics (rliable) the table and the benchmarks use.
"""
