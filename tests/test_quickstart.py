"""README's Python quick-start, run as written (in a temporary folder), and what hangs on its run: the
logged-metrics page against the run's real CSV headers, and examples/serve_onnx.py on the run's policy
exported to ONNX, with onnxruntime alone."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def quickstart(path: Path) -> str:
    blocks = [block for block in FENCE.findall(path.read_text(encoding="utf-8")) if "dmpo.train(" in block]
    assert len(blocks) == 1, f"{path.name}: one Python block should call dmpo.train, {len(blocks)} do"
    return blocks[0]


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory):
    """README's block executed in a fresh folder; its namespace and the run folder it wrote."""
    folder = tmp_path_factory.mktemp("quickstart")
    namespace = {"__name__": "readme_quickstart"}
    here = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(quickstart(ROOT / "README.md"), "README.md (quick-start)", "exec"), namespace)
    finally:
        os.chdir(here)
    return namespace, folder / namespace["summary"]["run_dir"]


def test_readme_quickstart_trains_evaluates_loads_and_predicts(quickstart_run):
    namespace, run = quickstart_run
    summary, scores, action = namespace["summary"], namespace["scores"], namespace["action"]
    assert summary["env_steps"] >= 600 and np.isfinite(summary["last_eval"]["return_mean"])
    assert (run / "snapshots" / "policy.msgpack").is_file() and (run / "config.json").is_file()
    assert len(scores["episode_returns"]) == 2 and np.isfinite(scores["return_mean"])
    # predict returns the action in Pendulum's own bounds, as gymnasium's step takes it.
    assert np.shape(action) == (1,) and -2.0 <= float(action[0]) <= 2.0
    assert namespace["env"].unwrapped.spec.id == "Pendulum-v1"


def test_getting_started_shows_the_readme_quickstart():
    assert quickstart(ROOT / "docs" / "index.md") == quickstart(ROOT / "README.md")


def _documented_columns(page: str) -> dict[str, set[str]]:
    """{label: columns} from docs/metrics.md: each `## `label`` table, plus the shared counts table."""
    sections = re.split(r"^## ", page, flags=re.MULTILINE)
    counts = set(re.findall(r"^\| `([^`]+)` \|", sections[0], flags=re.MULTILINE))
    found = {}
    for section in sections[1:]:
        label = re.match(r"`([^`]+)`", section).group(1)
        columns = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))
        if "| the counts |" in section:
            columns |= counts
        found[label] = columns
    return found


def test_metrics_page_lists_every_logged_column(quickstart_run):
    _, run = quickstart_run
    logged = {}
    for path in sorted((run / "logs").glob("*/logs.csv")):
        with open(path, newline="", encoding="utf-8") as f:
            logged[path.parent.name] = set(next(csv.reader(f)))
    documented = _documented_columns((ROOT / "docs" / "metrics.md").read_text(encoding="utf-8"))
    assert set(logged) == set(documented) == {"environment_loop", "evaluator", "learner"}
    for label, columns in logged.items():
        assert documented[label] == columns, (label, sorted(columns ^ documented[label]))


NO_JAX = textwrap.dedent("""
    import runpy, sys

    class Blocked:  # `import jax` or `import dmpo` fails as if neither were installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("jax", "jaxlib", "flax", "dmpo"):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Blocked())
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def test_serve_example_runs_the_exported_policy_with_onnxruntime_alone(quickstart_run, tmp_path, monkeypatch):
    import dmpo
    from dmpo.cli.main import main as dmpo_main

    _, run = quickstart_run
    model = tmp_path / "policy.onnx"
    dmpo_main(["export", str(run), "--format", "onnx", "-o", str(model)])
    script = ROOT / "examples" / "serve_onnx.py"
    done = subprocess.run([sys.executable, "-c", NO_JAX, str(script), str(model), "--episodes", "2"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = re.compile(r"^episode \d \(seed \d\): return (-?[\d.]+)$", re.M)
    returns = [float(x) for x in line.findall(done.stdout)]
    assert len(returns) == 2 and all(-1700.0 <= r <= 0.0 for r in returns), done.stdout
    # The served action is dmpo's own for the same observation.
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from serve_onnx import OnnxPolicy

    served, policy = OnnxPolicy(str(model)), dmpo.load_policy(run)
    observation = np.array([0.3, -0.95, 1.2])
    np.testing.assert_allclose(served(observation), policy(observation), atol=1e-5)
