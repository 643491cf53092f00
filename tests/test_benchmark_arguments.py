"""benchmarks/tensorboard_resume.py parses its arguments: `--help` prints and writes nothing, and the
folder it writes into must be new or empty (it used to take `--help` for a folder name and write there,
and to remove whatever folder it was given)."""

from __future__ import annotations

import pytest


def test_tensorboard_resume_help_writes_nothing_and_a_used_folder_is_refused(benchmark_script, tmp_path,
                                                                              monkeypatch, capsys):
    script = benchmark_script("tensorboard_resume")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        script.parse_arguments(["--help"])
    assert done.value.code == 0 and "folder" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as done:
        script.parse_arguments([str(used)])
    assert done.value.code == 2 and (used / "keep.txt").read_text() == "mine"
    assert script.parse_arguments([str(tmp_path / "new")]) == tmp_path / "new"
