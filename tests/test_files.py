"""Atomic file replacement: the destination holds the old bytes or the new ones, and no temp file stays."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from dmpo.utils.files import (
    atomic_directory,
    atomic_write,
    atomic_write_bytes,
    atomic_write_text,
    current_umask,
    make_kept_directory,
)


def test_atomic_write_replaces_content(tmp_path):
    path = tmp_path / "f.txt"
    atomic_write_text(path, "one")
    atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_failed_rename_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    atomic_write_text(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk went away"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_writer_failing_midway_keeps_old_file(tmp_path):
    path = tmp_path / "arrays.npz"
    atomic_write(path, lambda f: np.savez(f, x=np.arange(3)))

    def half_then_fail(file):
        file.write(b"PK\x03\x04 partial")
        raise KeyboardInterrupt  # a Ctrl-C in the middle of a write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, half_then_fail, sync_directory=True)
    with np.load(path) as archive:
        np.testing.assert_array_equal(archive["x"], np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["arrays.npz"]


def test_temp_prefix_names_the_temporary_file(tmp_path):
    seen = []
    atomic_write(tmp_path / "out.bin", lambda f: seen.extend(os.listdir(tmp_path)), temp_prefix=".mine_")
    assert len(seen) == 1 and seen[0].startswith(".mine_") and seen[0].endswith(".tmp")
    assert (tmp_path / "out.bin").read_bytes() == b""


def test_kept_files_follow_the_umask_and_private_ones_stay_owner_only(tmp_path):
    previous = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        atomic_write_text(tmp_path / "kept.txt", "shared")
        atomic_write(tmp_path / "private.txt", lambda file: file.write(b"mine"), private=True)
        folder = make_kept_directory(tmp_path, ".temp.")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "kept.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "private.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750 and folder.name.startswith(".temp.")


def test_atomic_directory_appears_complete_or_not_at_all(tmp_path):
    target = tmp_path / "out" / "saved"
    with atomic_directory(target) as temp:
        (temp / "a.txt").write_text("a")
        assert not target.exists() and temp.parent == target.parent  # beside it, renamed at the end
    assert [p.name for p in target.iterdir()] == ["a.txt"]
    assert [p.name for p in target.parent.iterdir()] == ["saved"]  # no temporary folder left
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~current_umask()  # mkdir's mode, not 0700


def test_atomic_directory_failing_midway_leaves_nothing_and_never_replaces(tmp_path):
    target = tmp_path / "saved"
    with pytest.raises(RuntimeError, match="killed"), atomic_directory(target, temp_prefix=".tmp-") as temp:
        (temp / "half.txt").write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    target.mkdir()
    with pytest.raises(FileExistsError, match="never replaced"), atomic_directory(target):
        pass
    assert list(tmp_path.iterdir()) == [target]
