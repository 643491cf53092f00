"""The figures on README and the results pages are what their commands print.

Every table under a `<!-- printed by: COMMAND -->` line of docs/results/ is compared, row by row, with
the output of COMMAND (benchmarks/recorded.py or benchmarks/side_by_side.py --summarise, run here
in-process on the recorded files). Bootstrap intervals are compared as intervals only: the pages show
them at the script's 10,000 resamples, the test computes 200; every other cell must be equal. README's
two results tables are short restatements, rebuilt here from the same outputs cell by cell."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- printed by: (.+?) -->$")
INTERVAL = re.compile(r"\[-?[\d.]+, -?[\d.]+\]")
RESAMPLES = 200
# `--summarise FILE`: table(summary)
SUMMARISED = ("benchmarks/chaos_soak.py", "benchmarks/gcs_memory.py", "benchmarks/gcs_actor_churn.py")


@pytest.fixture(scope="module")
def printed(benchmark_script):
    """`printed(command)`: what the command prints, computed once per command."""
    recorded, side_by_side = benchmark_script("recorded"), benchmark_script("side_by_side")
    outputs: dict[str, str] = {}

    def run(command: str) -> str:
        if command not in outputs:
            script, *args = shlex.split(command)
            if script == "benchmarks/recorded.py":
                files = [json.loads((ROOT / a).read_text(encoding="utf-8"))
                         for a in args if a.endswith(".json")]
                if "--seeds" in args:
                    after = args[args.index("--seeds") + 1:]
                    seeds = [int(a) for a in after[:next((i for i, a in enumerate(after) if not a.isdigit()),
                                                         len(after))]]
                    files = [recorded.only_seeds(data, seeds) for data in files]
                if "--time-to-score" in args:
                    outputs[command] = recorded.time_to_score_markdown(recorded.recorded_times(files))
                else:
                    outputs[command] = recorded.tables(recorded.pooled(files), resamples=RESAMPLES)
            elif script == "benchmarks/side_by_side.py" and args[0] == "--summarise":
                outputs[command] = "\n".join(side_by_side.summary_markdown(json.loads((ROOT / a).read_text()))
                                             for a in args[1:])
            elif script in SUMMARISED and args[0] == "--summarise":
                summary = json.loads((ROOT / args[1]).read_text())
                outputs[command] = benchmark_script(Path(script).stem).table(summary)
            else:
                raise AssertionError(f"no way to run {command!r} here: name recorded.py, side_by_side.py "
                                     "--summarise, chaos_soak.py --summarise or gcs_memory.py --summarise")
        return outputs[command]

    return run


def marked_tables(text: str) -> list[tuple[str, list[str]]]:
    """(command, table lines) for every `printed by` marker: the table right under it."""
    lines, found = text.splitlines(), []
    for index, line in enumerate(lines):
        match = MARKER.match(line)
        if match:
            table = []
            for following in lines[index + 1:]:
                if not following.startswith("|"):
                    break
                table.append(following)
            found.append((match.group(1).split(" | ")[0], table))
    return found


def _masked(line: str) -> str:
    return INTERVAL.sub("[interval]", line)


PAGES = sorted((ROOT / "docs" / "results").glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_marked_table_is_what_its_command_prints(page, printed):
    for command, table in marked_tables(page.read_text(encoding="utf-8")):
        assert len(table) >= 3, f"{page.name}: no table with a row under 'printed by: {command}'"
        output = {_masked(line) for line in printed(command).splitlines()}
        for line in table:
            assert _masked(line) in output, f"{page.name}: not printed by {command}:\n{line}"


def test_the_pages_that_restate_learning_results_mark_their_tables():
    marked = {page.name: len(marked_tables(page.read_text(encoding="utf-8"))) for page in PAGES}
    assert all(marked[name] >= 2 for name in ("index.md", "learning.md", "time-to-score.md", "archive.md"))


def _rows(text: str, after: str = "") -> list[list[str]]:
    """The cells of the table rows in `text` (from the line `after` on, when given)."""
    if after:
        text = text[text.index(after):]
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif rows and not line.startswith("|"):
            break
    return rows


def _readme_learning_row(printed, files: str, config: str) -> str:
    finals = {row[0]: row[3] for row in _rows(printed(f"benchmarks/recorded.py {files}")) if row[1] == config}
    times = {row[0]: row for row in _rows(printed(f"benchmarks/recorded.py --time-to-score {files}"))
             if row[1] == config}
    tasks = ("dmc:cartpole-swingup", "dmc:walker-walk", "dmc:cheetah-run")
    minutes = []
    for task in tasks:
        reached, total = times[task][3].split("/")
        minutes.append(times[task][5] + ("" if reached == total else f" ({reached} of {total})"))
    return " | ".join([*(finals[task] for task in tasks), " / ".join(minutes)])


def test_readme_results_are_what_the_commands_under_them_print(printed):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    default = ("benchmarks/recorded/fast-b128-sweep-5seeds-100k.json "
               "benchmarks/recorded/fast-b128-cheetah-seeds5-9-100k.json")
    former = "benchmarks/recorded/fast-sweep-5seeds-100k.json"
    for files in (default, former):  # the commands README shows are the ones checked
        assert f".venv/bin/python benchmarks/recorded.py --time-to-score {files.split()[0]}" in readme
    assert ("| `fast` (the default) | 0–4, cheetah-run 0–9 | "
            + _readme_learning_row(printed, default, "fast-b128-sweep") + " |") in readme
    assert ("| `fast` with batch 256 (the default until 2026-12-05) | 0–4 | "
            + _readme_learning_row(printed, former, "fast-sweep").replace("**", "") + " |") in readme

    def median(name: str, kind: str, metric: int) -> str:
        text = printed(f"benchmarks/side_by_side.py --summarise benchmarks/recorded/side-by-side/{name}.json")
        return next(row for row in _rows(text, "## Median over seeds") if row[0] == kind)[metric]

    rows = [("dmpo, the default (evaluation)", "-b128", "dmpo", 2, "**"),
            ("SBX SAC (evaluation)", "", "sac", 2, ""),
            ("dmpo, the default (training mean)", "-b128", "dmpo", 3, ""),
            ("Acme TF DMPO (training mean)", "", "acme", 3, "")]
    for label, suffix, kind, metric, bold in rows:
        cells = [f"{bold}{median(task + suffix, kind, metric)}{bold}"
                 for task in ("cartpole-swingup", "walker-walk")]
        assert f"| {label} | {cells[0]} | {cells[1]} |" in readme, label


def test_no_file_a_user_reads_or_runs_names_a_folder_of_one_machine():
    """Commands, logs and recorded results name folders as `$OUT`, `.venv` or a peer's variable, never
    a developer machine's own folders (which no reader has)."""
    machine_path = re.compile(r"(?<![\w$.])/(?:work|home|root|Users)/[A-Za-z]")
    roots = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "Makefile", *[
        ROOT / folder for folder in ("docs", "src", "benchmarks", "examples", ".ci")]]
    found = []
    for root in roots:
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            if path.suffix in {".png", ".gif", ".mp4", ".onnx", ".msgpack", ".pyc"}:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(ROOT)}: {match.group(0)}" for match in machine_path.finditer(text)]
    assert not found, found[:20]
