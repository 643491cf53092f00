"""`dmpo train` on a real terminal: tmux panes 80 and 200 columns wide, read back with capture-pane.

What a person sees: one status line (steps of the total and the ETA always; return, evaluation
return, updates/s, episodes as far as the width allows), evaluation results as short lines above it,
nothing cut off at 80 columns, and none of the logs' long rows.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from waiting import wait_for

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(
    TMUX is None, reason="tmux is not installed (apt-get install tmux): these tests need a real terminal")

TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.learner.num-samples", "2", "--agent.batch-size", "16",
        "--agent.min-replay-size", "100", "--agent.max-replay-size", "2000",
        "--agent.samples-per-insert", "16"]
WIDTHS = (80, 200)
STATUS = re.compile(r"^train 400/400 steps 100% ETA 0:00:00( \| .*)?$")
EVAL = re.compile(r"^eval @ (200|400): -?\d+\.\d ± 0\.0 over 1 episode$")


@pytest.fixture(scope="module")
def panes(tmp_path_factory):
    """{width: the pane's text after `dmpo train` finished}, both trained at once."""
    tmp = tmp_path_factory.mktemp("terminal")
    server = [TMUX, "-L", f"dmpo-test-{os.getpid()}", "-f", os.devnull]
    env = {**os.environ, "MUJOCO_GL": "egl", "JAX_PLATFORMS": "cpu"}
    try:
        for width in WIDTHS:
            command = [sys.executable, "-m", "dmpo.cli", "train", "--env", "gym:Pendulum-v1",
                       "--steps", "400", "--eval-every", "200", "--eval-episodes", "1",
                       "--checkpoint-every", "0", "--run-dir", str(tmp / f"run{width}"), *TINY]
            # The pane stays open after the command, so that its last screen can be read.
            shell = f"{shlex.join(command)}; echo $? > {tmp / f'exit{width}'}; sleep 3600"
            subprocess.run([*server, "new-session", "-d", "-s", f"w{width}", "-x", str(width), "-y", "30",
                            shell], check=True, env=env, cwd=tmp)
        for width in WIDTHS:
            wait_for(lambda w=width: (tmp / f"exit{w}").is_file(), f"dmpo train in the {width}-column pane",
                     timeout=900, period=1.0)
        screens = {}
        for width in WIDTHS:
            assert (tmp / f"exit{width}").read_text().strip() == "0"
            captured = subprocess.run([*server, "capture-pane", "-p", "-t", f"w{width}"], check=True,
                                      capture_output=True, text=True)
            screens[width] = [line.rstrip() for line in captured.stdout.splitlines() if line.strip()]
        return screens
    finally:
        subprocess.run([*server, "kill-server"], capture_output=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_status_line_fits_and_evaluations_print_above_it(panes, width):
    lines = panes[width]
    text = "\n".join(lines)
    assert all(len(line) <= width for line in lines), text  # capture-pane gives the screen's rows
    status = [i for i, line in enumerate(lines) if line.startswith("train ")]
    assert len(status) == 1, text  # one live line, redrawn in place, not a line per update
    assert STATUS.match(lines[status[0]]), text
    evals = [i for i, line in enumerate(lines) if EVAL.match(line)]
    assert len(evals) == 2 and max(evals) < status[0], text  # both evaluations, above the status line
    assert lines[status[0] + 1].startswith("finished: 400 env steps"), text  # the terminal wraps it
    for noise in ("[Evaluator]", "[Environment Loop]", "Traceback", "os.fork()", "settotalmass"):
        assert noise not in text, text


def test_narrow_terminal_drops_fields_from_the_right(panes):
    narrow = next(line for line in panes[80] if line.startswith("train "))
    wide = next(line for line in panes[200] if line.startswith("train "))
    assert "| return " in narrow and "upd/s" not in narrow and "episodes" not in narrow
    fields = r"\| return -?\d+\.\d \(mean2 -?\d+\.\d\) \| eval -?\d+\.\d \| [\d.]+ upd/s \| episodes 2$"
    assert re.search(fields, wide), wide
