"""What `dmpo train` says about its flags: a config error in the words of the flag the user typed,
and the warnings about a budget or batch that cannot work, before anything is built.

`ConfigError.field` names a dataclass field (`DMPOConfig.batch_size`); `flag_message` turns it into
the flag that sets it (`--agent.batch-size`), by walking `TrainConfig`'s nested dataclasses, the same
tree tyro builds the flags from (`--agent.learner.discount`: `TrainConfig.agent.learner.discount`).
"""

from __future__ import annotations

import re
import sys
import typing

from dmpo.config import TrainConfig
from dmpo.config.flags import flag_message, flag_of  # noqa: F401 - re-exported for the CLI
from dmpo.utils.spelling import closest

__all__ = ["budget_warnings", "fail", "flag_message", "flag_of", "known_flags", "unknown_flag_message"]


def fail(message: str) -> typing.NoReturn:
    """Ends the command with `dmpo: error: <message>` on stderr and exit status 2 (a usage error)."""
    print(f"dmpo: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def budget_warnings(config: TrainConfig) -> list[str]:
    """Settings that run but cannot learn: a budget that ends before the first update."""
    agent = config.agent
    needed = agent.min_observations
    if config.steps <= needed:
        by_batch = agent.batch_size >= agent.min_replay_size
        which = "--agent.batch-size" if by_batch else "--agent.min-replay-size"
        return [f"--steps {config.steps:,} ends before the agent's first update, which waits for "
                f"{needed:,} observations ({which} {needed:,}): this run will not learn; raise --steps "
                f"or lower {which}"]
    return []


def known_flags(command: typing.Callable[..., object]) -> frozenset[str] | None:
    """Every option string tyro gives `command` (`--steps`, `--no-progress`, `-h`), or None where this
    tyro cannot say (then tyro's own error stands)."""
    import warnings

    import tyro

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # get_parser is deprecated in favour of tyro's own backend
            parser = tyro.extras.get_parser(command)
        return frozenset(option for action in parser._actions for option in action.option_strings)
    except Exception:  # noqa: BLE001 - a tyro without argparse parsers: no pre-check
        return None


def unknown_flag_message(args: list[str], known: frozenset[str], command: str) -> str | None:
    """One line for the first `--option` in `args` that `command` does not have, with the closest
    flags by edit distance (`--step`: did you mean --steps?); None when every option is known."""
    normal = {flag.replace("_", "-"): flag for flag in known}
    for arg in args:
        if not arg.startswith("--") or arg == "--":
            continue
        typed = arg.partition("=")[0]
        if typed.replace("_", "-") in normal:
            continue
        near = closest(typed.replace("_", "-"), sorted(normal), separator=".")
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        return f"unrecognized option {typed} for dmpo {command}{hint} (dmpo {command} --help lists them all)"
    return None


def one_line_paragraphs(text: str) -> str:
    """A help text's paragraphs, each on one line (a blank line between paragraphs)."""
    return "\n\n".join(" ".join(part.split()) for part in re.split(r"\n\s*\n", text.strip()) if part.strip())


def reflow_help() -> None:
    """Help texts from docstrings read as sentences: tyro (1.0.x) joins a docstring's lines before it
    dedents them and keeps a line break before every indented line, so a field docstring's line breaks
    showed in `--help` in mid-sentence. Every help text goes through `one_line_paragraphs` instead; the
    terminal then wraps it. Checked by tests/test_cli.py (each option's help on one line)."""
    from tyro import _strings

    if getattr(_strings.remove_single_line_breaks, "__dmpo_reflow__", False):
        return
    one_line_paragraphs.__dmpo_reflow__ = True  # type: ignore[attr-defined]
    _strings.remove_single_line_breaks = one_line_paragraphs


def one_line_args(doc: str) -> str:
    """A Google-style docstring whose `Args:` entries are each on one line: tyro shows a parameter's
    description with its docstring's line breaks (docstring_parser keeps them)."""
    lines, out, in_args, indent = doc.split("\n"), [], False, None
    for line in lines:
        stripped = line.strip()
        if stripped == "Args:":
            in_args, indent = True, None
            out.append(line)
            continue
        if in_args and stripped:
            current = len(line) - len(line.lstrip())
            if indent is None:
                indent = current
            if current > indent and out:  # a continuation of the entry above
                out[-1] = out[-1].rstrip() + " " + stripped
                continue
            if current < indent:
                in_args = False
        elif in_args and not stripped:
            in_args = False
        out.append(line)
    return "\n".join(out)
