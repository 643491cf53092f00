"""Test-only: holds a checkpoint write at the end of a run until the test says go, so that a test can
signal `dmpo train` while its final checkpoint is being written (tests/test_signals.py).

Active only when DMPO_TEST_HOLD_DIR is set (the tests put this folder on PYTHONPATH, so that every
process of the run, Ray's workers included, loads it). The first `TrainingCheckpoints.save` of env
step >= DMPO_TEST_HOLD_STEP creates `<dir>/holding` and waits for `<dir>/go` (at most 300 s).
"""

import os

if os.environ.get("DMPO_TEST_HOLD_DIR"):
    import importlib.abc
    import sys
    import time
    from pathlib import Path

    _HOLD_DIR = Path(os.environ["DMPO_TEST_HOLD_DIR"])
    _HOLD_STEP = int(os.environ.get("DMPO_TEST_HOLD_STEP", "0"))
    _TARGET = "dmpo.lifecycle.checkpoints"

    def _patch(module):
        original = module.TrainingCheckpoints.save

        def save(self, step, *args, **kwargs):
            if step >= _HOLD_STEP and not (_HOLD_DIR / "holding").exists():
                (_HOLD_DIR / "holding").write_text(str(os.getpid()))
                deadline = time.monotonic() + 300
                while not (_HOLD_DIR / "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            return original(self, step, *args, **kwargs)

        module.TrainingCheckpoints.save = save

    class _PatchOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != _TARGET:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            sys.meta_path.insert(0, self)
            if spec is None:
                return None
            loader = spec.loader
            original_exec = loader.exec_module

            def exec_module(module):
                original_exec(module)
                _patch(module)

            loader.exec_module = exec_module
            return spec

    import importlib.util

    sys.meta_path.insert(0, _PatchOnImport())
