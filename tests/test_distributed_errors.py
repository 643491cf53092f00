"""`dmpo train --actors 1` on an environment that returns a NaN reward at step 50 of every episode:
the run ends with the very line the single-process trainer prints (episode, step, what was not
finite), after one replacement of the actor rather than ten, with the same words in run.json and no
terminal colour codes. The same run checks the private cluster's folder: while the run goes on,
nothing in it (folders, sockets) can be reached by the group or the world, and it is gone when the
run ends."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

pytest.importorskip("ray")

from private_folders import open_to_others  # noqa: E402

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[1]
NAN_ENV = "tests.envs_for_tests:make_nan_reward_at_step_50"
TINY = ["--env", NAN_ENV, "--eval-every", "0", "--no-progress", "--agent.networks.policy-layer-sizes", "8",
        "--agent.networks.critic-layer-sizes", "8", "--agent.networks.num-atoms", "5",
        "--agent.learner.num-samples", "2", "--agent.batch-size", "16", "--agent.min-replay-size", "100",
        "--agent.max-replay-size", "2000", "--steps", "2000"]
TIMEOUT = 420


def train(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dmpo.cli", "train", *TINY, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def error_lines(process: subprocess.CompletedProcess) -> list[str]:
    return [line for line in process.stderr.splitlines() if line.startswith("dmpo: error:")]


class FolderWatch:
    """Walks every `dmpo-ray-*` folder under `parent` until stopped: what the group or the world could
    reach (tests/private_folders.py), and the sockets seen."""

    def __init__(self, parent: str) -> None:
        self.parent, self.open_to_others, self.sockets = parent, set(), set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            for top in Path(self.parent).glob("dmpo-ray-*"):
                self.open_to_others.update(open_to_others(str(top)))
                for root, _, files in os.walk(top):
                    for name in files:
                        path = os.path.join(root, name)
                        with contextlib.suppress(FileNotFoundError):
                            if stat.S_ISSOCK(os.lstat(path).st_mode):
                                self.sockets.add(path)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_an_environment_failing_the_same_way_twice_ends_the_run_as_in_one_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           "JAX_PLATFORMS": "cpu", "MUJOCO_GL": "egl", "PYTHONUNBUFFERED": "1"}
    local = train(["--run-dir", str(tmp_path / "local")], env)
    [expected] = error_lines(local)
    assert local.returncode == 2 and "episode 1, step 50: the reward is not finite: nan" in expected, expected

    # Ray's socket paths must fit in 107 bytes: pytest's tmp_path is too deep for them.
    temp = tempfile.mkdtemp(prefix="de", dir="/tmp")
    try:
        watch = FolderWatch(temp)
        try:
            distributed = train(["--actors", "1", "--run-dir", str(tmp_path / "dist")],
                                {**env, "TMPDIR": temp})
        finally:
            watch.stop()
        output = distributed.stdout + distributed.stderr
        assert error_lines(distributed) == [expected], output[-4000:]
        assert distributed.returncode == 2 and "\x1b" not in output and "RayTaskError" not in output
        # No retries, and no resume hint after the failure (the start line names the folder, no more).
        after_start = [line for line in output.splitlines() if not line.startswith("run directory ")]
        assert "actor restarts" not in output and not any("--resume" in line for line in after_start)
        # The first failure was shown as it happened, with the environment's words; one replacement.
        message = expected.removeprefix("dmpo: error: ")
        warnings = [line for line in output.splitlines() if line.startswith("dmpo: warning: actor 0 failed")]
        assert warnings == [f"dmpo: warning: actor 0 failed (EnvError: {message}); a new one takes its "
                            "place (1 of at most 10 replacements)"], output[-4000:]
        run = json.loads((tmp_path / "dist" / "run.json").read_text())
        assert run["status"] == "failed", run
        assert run["status_reason"] == "EnvError: " + expected.removeprefix("dmpo: error: "), run
        assert "\x1b" not in json.dumps(run, ensure_ascii=False), run
        # The private cluster's folder: owner-only while the run went on, sockets included; then gone.
        assert watch.sockets, "the walk never saw the cluster's sockets"
        assert not watch.open_to_others, sorted(watch.open_to_others)
        assert not list(Path(temp).glob("dmpo-ray-*")), os.listdir(temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
