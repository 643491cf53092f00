"""The signal handling of `dmpo.lifecycle.interrupts`, in this process: when a signal is raised (not
inside start-up, not inside a critical block), that it is never swallowed, and what a second and a
third signal do while the run stops. The real `dmpo train` under signals is tests/test_signals.py."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from dmpo.lifecycle.interrupts import (
    Interrupted,
    abortable,
    as_signalled,
    critical,
    interrupt_on_signals,
    starting_up,
    stopping_since,
    training_started,
)
from test_faults import child_env, wait_for


def test_a_signal_while_starting_waits_for_training_to_start():
    done = []
    with pytest.raises(Interrupted), interrupt_on_signals(), starting_up():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("JAX and Ray started")  # not cut in half
        training_started()
        done.append("a training step")  # never reached
    assert done == ["JAX and Ray started"]


def test_a_start_up_part_that_cleans_up_after_itself_is_cut_short_by_a_signal_and_counts_from_it():
    import time

    done = []
    with pytest.raises(Interrupted) as raised, interrupt_on_signals(), starting_up():
        before = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)  # while JAX starts: held
        sent = stopping_since()
        done.append("JAX started")
        with abortable():  # Ray's servers: the signal that came is raised at once
            done.append("Ray started")  # never reached
    assert done == ["JAX started"] and raised.value.signum == signal.SIGTERM
    assert sent is not None and before <= sent <= time.monotonic()  # the deadline counts from the signal
    with pytest.raises(Interrupted), interrupt_on_signals(), starting_up():
        with abortable():
            os.kill(os.getpid(), signal.SIGTERM)  # inside: raised at once
            done.append("the raylet started")  # never reached
    assert done == ["JAX started"]


def test_an_interrupt_a_library_turned_into_a_bare_keyboard_interrupt_is_named_by_the_signal():
    with interrupt_on_signals():
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
        named = as_signalled(KeyboardInterrupt())  # what ray.get raises when the handler raised inside it
    assert isinstance(named, Interrupted) and named.signum == signal.SIGTERM
    with interrupt_on_signals():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        plain = KeyboardInterrupt()
        assert as_signalled(plain) is plain  # a Ctrl-C stays a Ctrl-C


def test_a_critical_block_that_raises_takes_its_pending_signal_with_it():
    with interrupt_on_signals():
        with pytest.raises(ValueError, match="the step failed"), critical():
            os.kill(os.getpid(), signal.SIGTERM)
            raise ValueError("the step failed")
        with critical():
            pass  # no interrupt left over from the block that failed
    with interrupt_on_signals(), critical():  # nor in the next run of this process
        pass


def test_a_second_signal_while_stopping_is_ignored_and_says_so(capfd):
    stopped = []
    with pytest.raises(Interrupted), interrupt_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            stopped.append("never")
        except Interrupted:
            os.kill(os.getpid(), signal.SIGTERM)  # while the final checkpoint is written
            stopped.append("final checkpoint written")
            raise
    assert stopped == ["final checkpoint written"]
    err = capfd.readouterr().err
    assert err.strip().splitlines() == [
        "dmpo: SIGTERM ignored: already stopping (writing the final checkpoint); a third Ctrl-C exits at "
        "once, keeping the previous checkpoint"], err


def test_an_interrupt_swallowed_by_a_garbage_collector_callback_is_raised_again(capfd):
    """JAX runs Python code in a gc callback; Python prints an exception raised there and drops it."""
    armed = [True]

    def callback(phase: str, info: dict) -> None:
        if armed[0]:
            armed[0] = False
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs inside this callback
            sum(range(10))

    gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyboardInterrupt), interrupt_on_signals():
            gc.collect()
            wait_for(lambda: False, "the interrupt to come again", timeout=30, period=0.01)
    finally:
        gc.callbacks.remove(callback)
    assert not armed[0]
    assert "Exception ignored" not in capfd.readouterr().err


THIRD_CTRL_C = """
import os, signal, subprocess, sys
from dmpo.lifecycle.interrupts import interrupt_on_signals, when_abandoned

child = subprocess.Popen(["sleep", "300"])
print(child.pid, flush=True)
mark = lambda: open(sys.argv[1], "w").write("interrupted")
with interrupt_on_signals(), when_abandoned(mark):
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:  # writing the final checkpoint...
        os.kill(os.getpid(), signal.SIGINT)  # ignored
        os.kill(os.getpid(), signal.SIGINT)  # exits at once
        print("not reached", flush=True)
"""


def test_a_third_ctrl_c_exits_at_once_killing_what_the_run_started(tmp_path):
    status = tmp_path / "status"
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(THIRD_CTRL_C), str(status)],
                            capture_output=True, text=True, timeout=120, env=child_env())
    assert result.returncode == 130, result.stderr
    assert "not reached" not in result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "dmpo: exited at once on a third Ctrl-C; the previous checkpoint is kept"), result.stderr
    assert status.read_text() == "interrupted"
    child = int(result.stdout.split()[0])

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, "the child to be killed", timeout=10, period=0.05)


HELD_IN_C = """
import ctypes, os, signal, sys, threading
from dmpo.lifecycle.interrupts import interrupt_on_signals

with interrupt_on_signals():
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:  # stopping; the main thread is held in a C call (Ray's ray.get between its
        # checks for signals): it runs no handler, so a second and a third Ctrl-C come to one call.
        held = threading.Event()

        def send():  # a signal a thread sends itself is delivered to it at once
            held.wait()
            for _ in range(2):
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        sender = threading.Thread(target=send)  # (started before the block: a thread inherits the mask)
        sender.start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        held.set()
        ctypes.CDLL(None).sleep(30)  # the C call (SIGINT blocked in this thread: not cut short either)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        print("not reached", flush=True)
"""


def test_a_third_ctrl_c_exits_at_once_while_the_main_thread_is_held_in_a_c_call():
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(HELD_IN_C)], capture_output=True,
                            text=True, timeout=120, env=child_env())
    assert result.returncode == 130 and "not reached" not in result.stdout, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [
        "dmpo: SIGINT ignored: already stopping (writing the final checkpoint); a third Ctrl-C exits at "
        "once, keeping the previous checkpoint",
        "dmpo: exited at once on a third Ctrl-C; the previous checkpoint is kept"], result.stderr
