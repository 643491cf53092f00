"""Packaging: compatible ranges in pyproject.toml that the lock satisfies, Ray only as an extra, and
the single-process path working without Ray installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def locked_versions() -> dict[str, str]:
    versions = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            name, version = line.split("==")
            versions[canonical(name)] = version.strip()
    return versions


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_core_dependencies_are_ranges_and_ray_is_an_extra():
    core = [Requirement(spec) for spec in project()["dependencies"]]
    names = {canonical(req.name) for req in core}
    assert "ray" not in names and "jaxlib" not in names  # jaxlib comes with jax (or with jax[cuda12])
    pinned = {canonical(req.name) for req in core if any(s.operator == "==" for s in req.specifier)}
    assert pinned == {"mujoco"}  # the known dm-control break (stack notes)
    extras = project()["optional-dependencies"]
    assert [canonical(Requirement(spec).name) for spec in extras["distributed"]] == ["ray"]
    cuda = Requirement(extras["cuda"][0])
    jax = next(req for req in core if req.name == "jax")
    assert cuda.name == "jax" and cuda.extras == {"cuda12"} and cuda.specifier == jax.specifier


def test_the_lock_satisfies_every_range_and_holds_the_extras():
    locked = locked_versions()
    extras = project()["optional-dependencies"]
    tested_extras = [*extras["distributed"], *extras["dev"], *extras["wandb"], *extras["mlflow"],
                     *extras["export"], *extras["bench"], *extras["sweep"]]
    for spec in [*project()["dependencies"], *tested_extras]:
        req = Requirement(spec)
        name = canonical(req.name)
        assert name in locked, f"{name} is missing from requirements.lock"
        assert req.specifier.contains(locked[name], prereleases=True), (spec, locked[name])


def test_the_lock_keeps_the_constraints_the_package_ranges_leave_open():
    """constraints.txt narrows the lock only: each of its lines holds in requirements.lock, and none of them
    narrows the package's own ranges (users may install what the lock avoids)."""
    locked = locked_versions()
    lines = [line.split("#")[0].strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    constraints = [Requirement(line) for line in lines if line]
    assert constraints
    ranges = {canonical(Requirement(spec).name) for spec in project()["dependencies"]}
    for req in constraints:
        name = canonical(req.name)
        assert req.specifier.contains(locked[name]), (str(req), locked[name])
        assert name not in ranges, f"{name}: a constraint of the lock, not a range of the package"


BLOCK_RAY = textwrap.dedent("""
    import sys

    class NoRay:  # makes `import ray` fail as if Ray were not installed
        def find_spec(self, name, path=None, target=None):
            if name == "ray" or name.startswith("ray."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoRay())
""")


def test_single_process_path_imports_no_ray_and_actors_name_the_extra(tmp_path):
    script = BLOCK_RAY + textwrap.dedent(f"""
        import dmpo, dmpo.cli.main, dmpo.agent.core, dmpo.run.local, dmpo.agent.learning
        import dmpo.agent.policies.snapshot
        from dmpo import DMPO, train, load_policy  # the lazy public API
        assert "ray" not in sys.modules, sorted(m for m in sys.modules if m.startswith("ray"))
        print("imports ok", flush=True)
        dmpo.cli.main.main(["train", "--actors", "2", "--steps", "10",
                            "--run-dir", {str(tmp_path / "run")!r}])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert "imports ok" in result.stdout, result.stderr
    assert result.returncode == 2, result.stderr
    assert "--actors needs Ray" in result.stderr and "pip install 'dmpo-jax[distributed]'" in result.stderr
    assert "pip install -e '.[distributed]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # failed before creating anything
