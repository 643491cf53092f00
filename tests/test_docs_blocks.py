"""Every code block of README and the docs is run through the code it shows, so that a renamed flag,
preset, module or extra fails here instead of in a user's terminal.

- ```bash blocks: each command is parsed, not run. `dmpo ...` goes through the CLI's own parser (tyro,
  with the commands' bodies replaced by stubs that record the call), `python benchmarks/X.py` and
  `python examples/X.py` through the script's own argparse (stopped right after parsing), `pip install`
  must name this project's extras or another project, `make` a Makefile target; any other program must
  be on the list below.
- ```python blocks compile, and every `dmpo` module, name and attribute they import or use exists.
  (README's quick-start also runs: tests/test_quickstart.py.)
- Other blocks must say what they are (```text, ```ini); a fence without a language fails.
- docs/cli-reference.md lists exactly the flags each `dmpo` command's parser has.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import re
import runpy
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md",
         *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "changelog.md")]
LANGUAGES = {"bash", "python", "text", "ini"}
# Programs whose commands are shown but not checked further (system tools, Ray's own CLI, dev tools).
OTHER_PROGRAMS = {"apt-get", "sudo", "source", "export", "cd", "mkdir", "cp", "ls", "cat", "kill", "ray",
                  "uv", "git", "tmux", "tensorboard", "nvidia-smi", "mkdocs", "ruff", "pytest", "echo",
                  "sbatch", "srun", "wait", "rm", "trap", "umask"}
PLACEHOLDER_SCRIPTS = {"my_script.py"}  # a user's own script, named in prose
PREFIXES = {"nice", "time", "env", "sudo", "exec", "nohup", "timeout"}


def blocks() -> list[tuple[str, str, str]]:
    """(page, language, code) of every fenced block."""
    found = []
    for page in PAGES:
        for language, code in FENCE.findall(page.read_text(encoding="utf-8")):
            found.append((str(page.relative_to(ROOT)), language, code))
    return found


BLOCKS = blocks()


def test_every_fence_names_its_language():
    unnamed = [(page, code.splitlines()[0] if code else "") for page, language, code in BLOCKS
               if language not in LANGUAGES]
    assert not unnamed, f"fences without a known language ({sorted(LANGUAGES)}): {unnamed}"


def test_no_command_hides_in_an_indented_block():
    """Indented code blocks are not collected: commands must be fenced."""
    pattern = re.compile(r"^ {4,}(\S+=\S+ )*(nice -n \d+ )?(\.venv/bin/)?(dmpo|python\d?|pip) ", re.MULTILINE)
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        assert not pattern.findall(text), f"{page.name}: an indented command; put it in a ```bash block"


# -- shell commands ---------------------------------------------------------------------------------------

def commands(code: str) -> list[list[str]]:
    """The simple commands of a bash block: continuations joined, comments, redirections and operators
    (&&, ||, ;, |, &) dropped, leading VAR=value assignments and wrappers (nice -n 5, sudo) removed."""
    found = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split, lexer.commenters = True, "#"
        current: list[str] = []
        tokens = iter(list(lexer))
        for token in tokens:
            if token in {";", "&&", "||", "|", "&", "(", ")"}:
                found.append(current)
                current = []
            elif token in {">", ">>", "<", "2>", "&>"} or token.endswith(">"):
                next(tokens, None)  # the redirection's target
                if current and current[-1].isdigit():
                    current.pop()
            else:
                current.append(token)
        found.append(current)
    stripped = []
    for command in found:
        while command and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]) or command[0] in PREFIXES):
            head = command.pop(0)
            if head in {"nice", "timeout"} and command and command[0] == "-n":
                command = command[2:]
            elif head == "timeout" and command:
                command = command[1:]
        if command:
            stripped.append(command)
    return stripped


SHELL = [(page, command) for page, language, code in BLOCKS if language == "bash"
         for command in commands(code)]


class _Parsed(Exception):
    """Raised by the patched argparse once a script's arguments parsed."""


@pytest.fixture(scope="module")
def dmpo_cli():
    """`parse(argv)`: `dmpo argv` through the real CLI with every command's body replaced by a stub, so
    that tyro builds (and validates) the configs and nothing runs. Returns the recorded calls."""
    import dmpo.cli.main as cli
    import dmpo.cli.sweep_command as sweeps
    from dmpo.config import TrainConfig

    calls: list[tuple[str, dict]] = []

    def stub(function, name):
        @functools.wraps(function)
        def record(*args, **kwargs):
            calls.append((name, kwargs))
        return record

    names = ("train", "evaluate", "plot", "export", "check_env")
    patched = {(cli, name): getattr(cli, name) for name in names}
    patched[(sweeps, "sweep")] = sweeps.sweep
    patched[(cli, "saved_run_config")] = cli.saved_run_config
    for (module, name), function in patched.items():
        setattr(module, name, stub(function, name))
    cli.saved_run_config = lambda run: TrainConfig()  # `--resume RUN` of a run that is not here

    def parse(argv: list[str]) -> list[tuple[str, dict]]:
        calls.clear()
        cli.main(list(argv))
        return list(calls)

    yield parse
    for (module, name), function in patched.items():
        setattr(module, name, function)


def _check_dmpo(argv: list[str], parse) -> None:
    if argv[:1] == ["sweep"] and "--" in argv:  # the flags after -- go to every trial's `dmpo train`
        parse(["train", *argv[argv.index("--") + 1:]])
    if argv[:1] == ["sweep"]:
        for flag in ("--grid", "--space"):
            for index in [i for i, arg in enumerate(argv) if arg == flag]:
                key, _, values = argv[index + 1].partition("=")
                parse(["train", f"--{key}", values.split(",")[0].split(":")[0]])
    if "--help" in argv:
        with pytest.raises(SystemExit) as done:
            parse(argv)
        assert done.value.code == 0
        return
    assert parse(argv), f"dmpo {shlex.join(argv)}: no command ran"


def _check_script(script: Path, argv: list[str], monkeypatch) -> None:
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    monkeypatch.syspath_prepend(str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except _Parsed:
        return
    raise AssertionError(f"{script.name} {shlex.join(argv)}: the script did not parse its arguments")


def _check_pip(argv: list[str]) -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    if argv[:1] != ["install"]:
        return
    for requirement in (arg for arg in argv[1:] if not arg.startswith("-")):
        name, _, rest = requirement.partition("[")
        wanted = set(rest.rstrip("]").split(",")) - {""}
        assert name.lower() not in {"dmpo"}, f"pip install {requirement}: PyPI's dmpo is another project"
        if name in {".", "dmpo-jax"} or name.startswith("dmpo_jax-"):
            assert wanted <= extras, f"pip install {requirement}: no extra {sorted(wanted - extras)}"


@pytest.mark.parametrize(("page", "command"), SHELL, ids=[f"{p}:{shlex.join(c)[:60]}" for p, c in SHELL])
def test_shell_command_parses(page, command, dmpo_cli, monkeypatch):
    program, *argv = command
    name = program.rsplit("/", 1)[-1]
    if name == "dmpo":
        return _check_dmpo(argv, dmpo_cli)
    if name in {"python", "python3"}:
        if argv[:2] == ["-m", "dmpo.cli"]:
            return _check_dmpo(argv[2:], dmpo_cli)
        if argv[:2] == ["-m", "pip"]:
            return _check_pip(argv[2:])
        if argv[:1] in (["-m"], ["-c"]):
            if argv[0] == "-c":
                compile(argv[1], f"{page}: python -c", "exec")
            return None
        script = ROOT / argv[0]
        if argv[0] in PLACEHOLDER_SCRIPTS:
            return None
        assert script.is_file(), f"{page}: python {argv[0]}: no such script"
        return _check_script(script, argv[1:], monkeypatch)
    if name == "pip":
        return _check_pip(argv)
    if name == "make":
        targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
        assert all(arg in targets or "=" in arg for arg in argv), f"{page}: make {argv}: no such target"
        return None
    assert name in OTHER_PROGRAMS, f"{page}: {shlex.join(command)}: a program this test does not know"


# -- Python blocks ----------------------------------------------------------------------------------------

PYTHON = [(page, code) for page, language, code in BLOCKS if language == "python"]


@pytest.mark.parametrize(("page", "code"), PYTHON, ids=[f"{p}:{i}" for i, (p, _) in enumerate(PYTHON)])
def test_python_block_compiles_and_names_what_exists(page, code):
    tree = ast.parse(code, filename=page)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dmpo":
            module = importlib.import_module(node.module)
            for alias in node.names:
                found = hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}")
                assert found, f"{page}: from {node.module} import {alias.name}: no such name"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dmpo":
                    importlib.import_module(alias.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "dmpo":
            import dmpo

            exists = hasattr(dmpo, node.attr) or importlib.util.find_spec(f"dmpo.{node.attr}") is not None
            assert exists, f"{page}: dmpo.{node.attr}: no such name"


# -- install hints ----------------------------------------------------------------------------------------

HINT_ROOTS = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "docs", ROOT / "examples",
              ROOT / "benchmarks", ROOT / "pyproject.toml", ROOT / "Makefile", ROOT / "src", ROOT / ".ci"]
OTHER_PROJECT = re.compile(r"(?<![\w./-])dmpo\[")  # `dmpo[extra]`: an extra of PyPI's unrelated `dmpo`


def test_no_install_hint_names_another_projects_distribution():
    files = [p for root in HINT_ROOTS for p in ([root] if root.is_file() else root.rglob("*"))
             if p.is_file() and p.suffix in {".md", ".py", ".toml", ""} and "recorded" not in p.parts]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if OTHER_PROJECT.search(line)]
    assert not found, f"install hints naming PyPI's dmpo (use dmpo-jax[...] or .[...]): {found}"


# -- the flag reference -----------------------------------------------------------------------------------

def test_cli_reference_lists_every_flag_of_every_command():
    from dmpo.cli import main as cli
    from dmpo.cli.flags import known_flags
    from dmpo.cli.sweep_command import sweep

    page = (ROOT / "docs" / "cli-reference.md").read_text(encoding="utf-8")
    commands = {"train": cli.train, "eval": cli.evaluate, "plot": cli.plot, "export": cli.export,
                "check-env": cli.check_env, "sweep": sweep}
    sections = dict(re.findall(r"^## `dmpo ([a-z-]+)`\n(.*?)(?=^## |\Z)", page,
                               flags=re.MULTILINE | re.DOTALL))
    assert set(sections) == set(commands)
    for name, command in commands.items():
        listed = set(re.findall(r"`(--?[a-z][a-z0-9.-]*)`", sections[name]))
        flags = set(known_flags(command)) - {"-h", "--help"}
        rows = "\n".join(line for line in sections[name].splitlines() if line.startswith("| `-"))
        assert flags <= set(re.findall(r"`(--?[a-z][a-z0-9.-]*)`", rows)), (name, sorted(flags - listed))
        documented = {flag for line in rows.splitlines() for flag in re.findall(r"`(--?[a-z][a-z0-9.-]*)`",
                                                                                line.split(" | ")[0])}
        assert documented == flags, (name, sorted(documented ^ flags))


def test_readme_stays_a_landing_page_that_opens_with_its_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 160
    first = next(code for language, code in FENCE.findall(readme) if language == "bash")
    assert [line.split()[:2] for line in first.splitlines()] == [["make", "train"], ["make", "test"]]
