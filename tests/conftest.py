"""Test-wide settings: headless rendering and a persistent XLA compilation cache.

Many tests build small learners whose jitted update has the same HLO; the on-disk cache lets each
shape compile once per machine instead of once per test. The cache is also named in the environment
(CACHE_ENV), so that `dmpo` subprocesses and Ray workers started by the tests share it.
"""

import importlib.util
import os
import pathlib

os.environ.setdefault("MUJOCO_GL", "egl")

import jax  # noqa: E402
import pytest  # noqa: E402

_CACHE = pathlib.Path(os.environ.get("DMPO_TEST_JAX_CACHE", pathlib.Path.home() / ".cache" / "dmpo-test-xla"))
CACHE_ENV = {"JAX_COMPILATION_CACHE_DIR": str(_CACHE), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5"}
for _name, _value in CACHE_ENV.items():
    os.environ.setdefault(_name, _value)
jax.config.update("jax_compilation_cache_dir", str(_CACHE))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


_BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="session")
def benchmark_script():
    """Loads `benchmarks/<name>.py` (not a package) as the module `benchmark_<name>`, once per name."""
    loaded = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"benchmark_{name}", _BENCHMARKS / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load
