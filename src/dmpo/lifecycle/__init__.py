"""A training run's life and the files it keeps, shared by the single process and the Ray program.

- `directory`: the run folder (config, run record, logs, checkpoints, snapshots, videos).
- `lock`: one process per run folder.
- `interrupts`: SIGINT, SIGTERM and SIGHUP as one stop path.
- `checkpoints`: the training checkpoint's state (build, verify, restore); `retention`: which ones stay.
- `callbacks`: user code at a run's events (public as `dmpo.callbacks`); `videos`: evaluation videos.
- `task_setup`: what both modes do with the task before anything is built.
- `schedule`: when a run evaluates and checkpoints (environment-step boundaries, one rule).
- `status`: the run's status machine (starting, running, finished, interrupted, failed).
- `resume`: what a resume may change, and from which checkpoint (or step 0) it continues.
"""
