"""A signal at the first moments of the real `dmpo` command (issue 47, item 4): while Python imports
dmpo's own modules, before any flag is parsed. It ends the command with one `dmpo:` line and 128 + the
signal's number, never a traceback or a silent death, as it does at every later moment
(tests/test_signals.py).

The moment is an event: the child holds at the first import of `dmpo.utils.files` (tests/signal_hold,
DMPO_TEST_HOLD_IMPORT), and the test signals it there. `import dmpo` used to import that module (through
`dmpo.callbacks`) before the command's entry point took the signals; now `dmpo plot` imports it under
them. `dmpo train` shares the entry point; its deferral of a signal that comes while it starts is
tests/test_signals.py's `jax` moment, the same path a signal at this moment now takes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from holds import holding_env
from test_faults import wait_for

MODULE = "dmpo.utils.files"


def signal_at_first_import(tmp_path: Path, args: list[str], signum: int) -> tuple[int, str]:
    hold = tmp_path / "hold"
    env = holding_env(hold)
    env["DMPO_TEST_HOLD_IMPORT"] = MODULE
    child = subprocess.Popen([sys.executable, "-m", "dmpo.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        wait_for(lambda: (hold / "importing").is_file() or child.poll() is not None,
                 f"the import of {MODULE}", timeout=60)
        assert child.poll() is None, child.communicate()[1][-3000:]
        child.send_signal(signum)
        (hold / "go").touch()  # a command that deferred the signal goes on to its next safe point
        _, stderr = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    return child.returncode, stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda signum: signal.Signals(signum).name)
def test_a_signal_while_the_command_imports_ends_it_with_one_line(tmp_path, signum):
    if signal.getsignal(signum) is signal.SIG_IGN:  # `nohup`: the child would inherit it ignored
        pytest.skip(f"{signal.Signals(signum).name} is ignored in this test process")
    code, stderr = signal_at_first_import(tmp_path, ["plot", str(tmp_path / "no-run")], signum)
    assert code == 128 + signum, stderr[-3000:]
    assert stderr.strip().splitlines() == ["dmpo: interrupted"], stderr[-3000:]

