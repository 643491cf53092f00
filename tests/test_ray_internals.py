"""Every private Ray name dmpo uses (dmpo.distributed.ray_internals) still exists in the installed Ray:
a Ray release that moves one fails here, naming it, instead of deep inside a cluster start."""

from __future__ import annotations

import importlib
import inspect

import pytest

ray = pytest.importorskip("ray")

from dmpo.distributed import ray_internals  # noqa: E402


@pytest.mark.parametrize("module, attribute", ray_internals.PRIVATE_NAMES)
def test_private_ray_name_exists(module, attribute):
    found = importlib.import_module(module)
    for part in attribute.split("."):
        assert hasattr(found, part), (f"Ray {ray.__version__} has no {module}.{attribute}, which "
                                      "dmpo.distributed.ray_internals uses: adapt that module")
        found = getattr(found, part)


def test_ray_init_accepts_the_private_temp_dir_argument():
    source = inspect.getsource(inspect.unwrap(ray.init))  # a private keyword, read from **kwargs
    assert f'kwargs.pop("{ray_internals.TEMP_DIR_ARGUMENT}"' in source, (
        f"ray.init of Ray {ray.__version__} has no {ray_internals.TEMP_DIR_ARGUMENT} argument")


def test_no_private_ray_name_outside_the_internals_module():
    import pathlib

    import dmpo

    root = pathlib.Path(dmpo.__file__).parent
    users = [str(path.relative_to(root)) for path in root.rglob("*.py")
             if path.name != "ray_internals.py" and ("ray._" in path.read_text() or
                                                     "from ray._" in path.read_text())]
    assert not users, f"private Ray API used outside dmpo/distributed/ray_internals.py: {users}"
