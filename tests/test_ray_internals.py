"""Every private Ray name dmpo uses (dmpo.run.distributed.ray_internals) still exists in the installed Ray:
a Ray release that moves one fails here, naming it, instead of deep inside a cluster start."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from dmpo.run.distributed import ray_internals  # noqa: E402


@pytest.mark.parametrize("module, attribute", ray_internals.PRIVATE_NAMES)
def test_private_ray_name_exists(module, attribute):
    found = importlib.import_module(module)
    for part in attribute.split("."):
        assert hasattr(found, part), (f"Ray {ray.__version__} has no {module}.{attribute}, which "
                                      "dmpo.run.distributed.ray_internals uses: adapt that module")
        found = getattr(found, part)


def test_a_private_cluster_keeps_its_session_files_in_its_own_temp_folder(shared_ray_cluster):
    # ray.init's private `_temp_dir` keyword (read from **kwargs: a release that drops it ignores it
    # silently) put the session under the cluster's fresh dmpo-ray-* folder, not Ray's shared /tmp/ray.
    session = Path(shared_ray_cluster.session_dir).resolve()
    temp = Path(tempfile.gettempdir()).resolve()
    ignored = f"Ray {ray.__version__} ignored ray.init({ray_internals.TEMP_DIR_ARGUMENT}=...): {session}"
    assert temp in session.parents and session.relative_to(temp).parts[0].startswith("dmpo-ray-"), ignored
    assert Path(ray_internals.session_dir()).resolve() == session  # what the private accessor reports


def test_no_private_ray_name_outside_the_internals_module():
    import pathlib

    import dmpo

    root = pathlib.Path(dmpo.__file__).parent
    users = [str(path.relative_to(root)) for path in root.rglob("*.py")
             if path.name != "ray_internals.py" and ("ray._" in path.read_text() or
                                                     "from ray._" in path.read_text())]
    assert not users, f"private Ray API used outside dmpo/distributed/ray_internals.py: {users}"
