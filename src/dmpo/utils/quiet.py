"""Silences two third-party messages a dmpo user can do nothing about; every other message passes.

- MuJoCo's compiler warns `compiler attribute 'settotalmass' is deprecated` each time gymnasium
  compiles a model file that uses it (HalfCheetah, three times per run). `quiet_mujoco_warnings`
  installs a MuJoCo warning handler that drops exactly that message and prints any other one to
  stderr as MuJoCo's default handler would (without its MUJOCO_LOG.TXT file in the working directory).
- imageio-ffmpeg starts ffmpeg with `preexec_fn=os.setpgrp` (so that Ctrl-C does not reach ffmpeg),
  and a `preexec_fn` makes Python run its fork handlers, among them JAX's `os.fork() ... JAX is
  multithreaded` warning — although nothing is forked but ffmpeg, which execs at once.
  `no_ffmpeg_fork_handlers` sets imageio-ffmpeg's documented switch that drops the `preexec_fn`;
  a Ctrl-C then also stops ffmpeg, and the video being written is discarded either way.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["no_ffmpeg_fork_handlers", "quiet_mujoco_warnings"]

_SILENCED_MUJOCO = ("compiler attribute 'settotalmass' is deprecated",)
_installed = threading.Lock()
_done = False


def _mujoco_warning(message: str) -> None:
    if not any(text in message for text in _SILENCED_MUJOCO):
        print(f"MuJoCo warning: {message}", file=sys.stderr, flush=True)


def quiet_mujoco_warnings() -> None:
    """Installs the handler (once per process; keeps a handler someone else installed)."""
    global _done
    with _installed:
        if _done:
            return
        _done = True
        import mujoco

        if mujoco.get_mju_user_warning() is None:
            mujoco.set_mju_user_warning(_mujoco_warning)


def no_ffmpeg_fork_handlers() -> None:
    os.environ.setdefault("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")
