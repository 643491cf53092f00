"""The `dmpo` executable's entry point: `main` installs the signal handlers (`dmpo.lifecycle.interrupts`)
before anything else is imported (the flag parser, JAX, Ray), so that a signal at any moment of
`dmpo train` ends the run the documented way; `dmpo.cli.main` is the command itself.
"""

from __future__ import annotations

import contextlib
import os
import sys


def main(argv: list[str] | None = None) -> None:
    """Runs `dmpo` with `argv` (default: the command line) under the run's signal handling."""
    from dmpo.lifecycle.interrupts import exit_code, interrupt_on_signals, starting_up

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with interrupt_on_signals():
            # `train` starts JAX and Ray, which a signal must not cut in half: one that arrives now
            # is raised once training starts (or the command ends).
            with starting_up() if args[:1] == ["train"] else contextlib.nullcontext():
                from dmpo.cli.main import main as command

                command(args)
    except KeyboardInterrupt as error:  # outside `train`'s own handling: before or after a run
        print("dmpo: interrupted", file=sys.stderr)
        code: object = exit_code(error)
    except SystemExit as done:
        if not getattr(done, "interrupted", False):
            raise
        code = done.code
    else:
        return
    # An interrupted process leaves at once, its files written: the interpreter's teardown with
    # JAX or Ray half-started can crash or print a swallowed interrupt after the line said it all.
    if argv is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))  # type: ignore[arg-type]
    raise SystemExit(code)


__all__ = ["main"]
