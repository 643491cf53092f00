"""A training run: the `Run` that owns its sequence (`run`), the calls it makes of a mode
(`executor`), and the one-process executor (`local`). The Ray executor is `dmpo.run.distributed.executor`."""
