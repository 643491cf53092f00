"""Test-wide settings: headless rendering and a persistent XLA compilation cache.

Many tests build small learners whose jitted update has the same HLO; the on-disk cache lets each
shape compile once per machine instead of once per test. The cache is also named in the environment
(CACHE_ENV), so that `dmpo` subprocesses and Ray workers started by the tests share it.
"""

import importlib.util
import os
import pathlib
import signal

os.environ.setdefault("MUJOCO_GL", "egl")
# A suite started in the background by a shell without job control (`make test &` in a script)
# inherits SIGINT and SIGQUIT ignored, and so would every `dmpo` it starts: the signal tests would see
# their signals dropped. They test dmpo's handling of those signals, so the suite starts from the
# defaults. (SIGHUP ignored by `nohup` is left as the user set it: tests/test_signals.py skips its
# SIGHUP cases then, saying why.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers get COLUMNS=80 and LINES=24, which every `dmpo` they start (in a tmux
    # pane of any width, tests/test_terminal.py) would take for its terminal's size.
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

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
    """Loads `benchmarks/<name>.py` (not a package) as the module `benchmark_<name>`, once per name,
    with `benchmarks/` on the import path, as when the script runs (its helpers are modules there)."""
    import sys

    if str(_BENCHMARKS) not in sys.path:
        sys.path.append(str(_BENCHMARKS))
    loaded = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"benchmark_{name}", _BENCHMARKS / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load


# ------------------------------------------------- one private Ray cluster, shared by neighbouring tests

class _SharedRayCluster:
    """The cluster behind the `shared_ray_cluster` fixture: started on first use, stopped by
    `pytest_runtest_teardown` below once no test after it asks for it."""

    def __init__(self) -> None:
        self.info = None

    def get(self):
        import ray

        from dmpo.run.distributed.cluster import start_local_cluster

        if self.info is None or not ray.is_initialized():
            self.info = start_local_cluster(num_cpus=2)
        return self.info

    def stop(self) -> None:
        from dmpo.run.distributed.cluster import stop_local_cluster

        if self.info is not None:
            self.info = None
            stop_local_cluster()  # waits for its processes and puts RAY_AUTH_* back


_SHARED_RAY = _SharedRayCluster()


@pytest.fixture
def shared_ray_cluster():
    """A private local Ray cluster (2 CPUs, `dmpo.run.distributed.start_local_cluster`) in this process,
    shared by consecutive tests that ask for it: the first starts it (10-40 s on a loaded 2-core
    machine), and it stops after the last test of a run of such tests (at the end of that test's
    module), so the tests after them see no Ray in this process, as they would without it.

    For tests that run Ray actors or the distributed program in this process (which reuses an
    initialised Ray) and need nothing of a fresh cluster. A test about what a cluster's processes
    inherit when it starts, or about its processes after it stops, starts its own."""
    pytest.importorskip("ray")
    return _SHARED_RAY.get()


def _uses_shared_cluster(item) -> bool:
    return "shared_ray_cluster" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """The tests that share the cluster run one after another, from the place of the first of them
    (each module's and each test's order otherwise kept), so that one start serves them all.

    Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`), the tests that start Ray (marked
    `ray`, or using the shared cluster) form two groups, each run one test after another on one worker
    (`_ray_group`): at most two clusters at once, one per core of the 2-core machines this runs on, and
    one start for the sharers. xdist hands the two groups out first (largest scopes first), so the
    other tests fill in behind whichever group ends sooner; one group for all of them was the suite's
    critical path (the other worker idled for its last third)."""
    users = [item for item in items if _uses_shared_cluster(item)]
    if len(users) >= 2:
        first = items.index(users[0])
        chosen = set(users)
        others = [item for item in items if item not in chosen]
        items[:] = others[:first] + users + others[first:]
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            if _uses_shared_cluster(item) or item.get_closest_marker("ray"):
                item.add_marker(pytest.mark.xdist_group(_ray_group(item)))
            elif _uses_module_fixture(item):
                # Each worker would otherwise make the module's fixture (often a training run) anew.
                item.add_marker(pytest.mark.xdist_group(item.module.__name__))
        # The two Ray groups first, the longer one first: `make test` turns off xdist's reordering of
        # groups by their number of tests (--no-loadscope-reorder), so the workers start with them.
        order = {"ray-clusters": 0, "ray-runs": 1}
        items.sort(key=lambda item: order.get(_group_of(item), 2))  # stable: the rest keep their order


def _group_of(item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else None


# Modules whose Ray tests build clusters of their own shape (two nodes on 127.0.0.1, the docs' head on
# its fixed port 6379, Ray Tune's driver) rather than one private `dmpo train --actors` cluster: with
# the sharers of the in-process cluster they are one group, every other Ray test the second. The
# split keeps the docs' fixed-port head away from any other multi-node start and about halves the
# Ray tests' time (measured: about 470 s and 370 s of 840 on a loaded machine).
_CLUSTER_SHAPE_MODULES = frozenset({"test_multinode", "test_cluster_docs", "test_sweep"})


def _uses_module_fixture(item) -> bool:
    fixtures = getattr(item, "_fixtureinfo", None)
    return fixtures is not None and any(
        definition.scope == "module" for definitions in fixtures.name2fixturedefs.values()
        for definition in definitions)


def _ray_group(item) -> str:
    if _uses_shared_cluster(item) or item.module.__name__.rpartition(".")[2] in _CLUSTER_SHAPE_MODULES:
        return "ray-clusters"
    return "ray-runs"


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down (they may still use Ray)
def pytest_runtest_teardown(item, nextitem):
    if _SHARED_RAY.info is None:
        return
    if nextitem is not None and (nextitem.module is item.module
                                 or "shared_ray_cluster" in getattr(nextitem, "fixturenames", ())):
        return
    _SHARED_RAY.stop()


class _GroupingCheck:
    """Fails every grouped test where the groups above do not reach pytest-xdist's scheduler.

    xdist 3.8 tells its scheduler an item's group by appending "@group" to the item's node id; under
    pytest 9.2 that no longer changes the id (pytest-dev/pytest-xdist#1386), and the groups are dropped
    without a word: module fixtures are made once per worker and Ray tests run anywhere. pyproject.toml
    keeps pytest below 9.2; this says so if another version comes in. (Exiting from a worker's
    collection shows only xdist's own assertion, so the tests fail instead, each with this reason.)"""

    def __init__(self) -> None:
        self.lost: str | None = None

    @pytest.hookimpl(trylast=True)  # after xdist's own hook has written the groups
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        for item in items:
            group = _group_of(item)
            if group is not None and not item.nodeid.endswith(f"@{group}"):
                self.lost = (f"--dist loadgroup lost the test groups (pytest {pytest.__version__} with "
                             "pytest-xdist: pytest-dev/pytest-xdist#1386); install the pytest version "
                             "requirements.lock names")
                return

    def pytest_runtest_setup(self, item):
        if self.lost is not None and _group_of(item) is not None:
            pytest.fail(self.lost, pytrace=False)


def pytest_configure(config):
    config.pluginmanager.register(_GroupingCheck(), "dmpo-xdist-grouping-check")
