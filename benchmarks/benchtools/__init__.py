"""Tooling for `benchmarks/` only (not installed with dmpo): reading run folders into results
(`results`), few-seed statistics through rliable (`statistics`), time to score (`time_to_score`) and
the benchmark launcher (`runs`)."""
