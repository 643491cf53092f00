"""Test-only holds that stop `dmpo train` at a known moment, so that a test can signal it there
(tests/test_signals.py, tests/test_interrupts_cli.py, tests/test_interrupt_snapshot.py).

Active only when DMPO_TEST_HOLD_DIR is set (the tests put this folder on PYTHONPATH, so that every
process of the run, Ray's workers included, loads it). Each hold creates a file in that folder, then
waits for `<dir>/go` (at most 300 s); a signal that arrives meanwhile interrupts the wait like any
other moment of the main thread.

- DMPO_TEST_HOLD_STEP=N: the first `TrainingCheckpoints.save` of env step >= N holds before writing
  (`<dir>/holding`): a signal during the final checkpoint write.
- DMPO_TEST_PAUSE_AFTER_CHECKPOINT=K: after the process's first `TrainingCheckpoints.save`, its K-th
  gymnasium env step holds before stepping (`<dir>/paused`): a signal mid-episode, never at a step
  that is already checkpointed. With 200-step Pendulum episodes and `--checkpoint-every 200`, every
  episode end is a checkpoint; a signal sent "after the first checkpoint appeared" may land there.
- DMPO_TEST_HOLD_EVALUATION_STEP=N: the first evaluation of the one-process executor at env step >= N
  holds before it runs (`<dir>/evaluating`): a signal during the evaluation at a run's budget.
- DMPO_TEST_HOLD_IMPORT=MODULE: the first import of MODULE holds before it is looked for
  (`<dir>/importing`): a signal while the command imports its modules, at its first moments.
- DMPO_TEST_HOLD_START=raylet|nodes: a distributed start-up that takes as long as the test wants (a
  loaded machine's minute), held (`<dir>/starting`) in the driver after Ray's GCS server started and
  before its raylet (`raylet`), or once the private cluster is up, before the nodes are created
  (`nodes`); `recovery`: a recovery of a lost node held after its line, before its new program starts.
"""

import os

if os.environ.get("DMPO_TEST_HOLD_DIR"):
    import importlib.abc
    import importlib.util
    import sys
    import time
    from pathlib import Path

    _HOLD_DIR = Path(os.environ["DMPO_TEST_HOLD_DIR"])
    _HOLD_STEP = int(os.environ["DMPO_TEST_HOLD_STEP"]) if "DMPO_TEST_HOLD_STEP" in os.environ else None
    _PAUSE_AFTER = (int(os.environ["DMPO_TEST_PAUSE_AFTER_CHECKPOINT"])
                    if "DMPO_TEST_PAUSE_AFTER_CHECKPOINT" in os.environ else None)
    _HOLD_IMPORT = os.environ.get("DMPO_TEST_HOLD_IMPORT")
    _HOLD_EVALUATION = (int(os.environ["DMPO_TEST_HOLD_EVALUATION_STEP"])
                        if "DMPO_TEST_HOLD_EVALUATION_STEP" in os.environ else None)
    _HOLD_START = os.environ.get("DMPO_TEST_HOLD_START")
    _steps_after_checkpoint = [None]  # None until the first checkpoint of this process is written

    def _hold(marker: str) -> None:
        (_HOLD_DIR / marker).write_text(str(os.getpid()))
        deadline = time.monotonic() + 300
        while not (_HOLD_DIR / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    def _patch_checkpoints(module):
        original = module.TrainingCheckpoints.save

        def save(self, step, *args, **kwargs):
            if _HOLD_STEP is not None and step >= _HOLD_STEP and not (_HOLD_DIR / "holding").exists():
                _hold("holding")
            path = original(self, step, *args, **kwargs)
            if _steps_after_checkpoint[0] is None:
                _steps_after_checkpoint[0] = 0
            return path

        module.TrainingCheckpoints.save = save

    def _patch_gym_steps(module):
        original = module.GymnasiumEnvironment.step

        def step(self, action):
            if _steps_after_checkpoint[0] is not None:
                _steps_after_checkpoint[0] += 1
                if _steps_after_checkpoint[0] == _PAUSE_AFTER:
                    _hold("paused")
            return original(self, action)

        module.GymnasiumEnvironment.step = step

    def _patch_evaluations(module):
        original = module.LocalExecutor.evaluate

        def evaluate(self, *args, **kwargs):
            if self.env_steps() >= _HOLD_EVALUATION and not (_HOLD_DIR / "evaluating").exists():
                _hold("evaluating")
            return original(self, *args, **kwargs)

        module.LocalExecutor.evaluate = evaluate

    _PATCHES = {"dmpo.lifecycle.checkpoints": _patch_checkpoints}
    if _HOLD_EVALUATION is not None:
        _PATCHES["dmpo.run.local"] = _patch_evaluations

    def _holding_before(module, owner: str, method: str):
        cls = getattr(module, owner)
        original = getattr(cls, method)

        def held(self, *args, **kwargs):
            _hold("starting")
            return original(self, *args, **kwargs)

        setattr(cls, method, held)

    if _HOLD_START == "raylet":
        _PATCHES["ray._private.node"] = lambda module: _holding_before(module, "Node", "start_raylet")
    elif _HOLD_START == "nodes":
        _PATCHES["dmpo.run.distributed.program"] = (
            lambda module: _holding_before(module, "DistributedProgram", "start"))
    elif _HOLD_START == "recovery":
        _PATCHES["dmpo.run.distributed.executor"] = (
            lambda module: _holding_before(module, "RayExecutor", "_start_again"))
    if _PAUSE_AFTER is not None:
        _PATCHES["dmpo.envs.gym_adapter"] = _patch_gym_steps

    class _PatchOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == _HOLD_IMPORT and not (_HOLD_DIR / "importing").exists():
                _hold("importing")
            if name not in _PATCHES:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None:
                return None
            loader = spec.loader
            original_exec = loader.exec_module

            def exec_module(module):
                original_exec(module)
                _PATCHES[name](module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PatchOnImport())
