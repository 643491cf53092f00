"""Atomic file replacement: the destination holds the old bytes or the new ones, and no temp file stays."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dmpo.utils.files import atomic_write, atomic_write_bytes, atomic_write_text


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
