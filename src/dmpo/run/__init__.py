"""A training run: the `Run` that owns its sequence, and the one-process executor."""
