"""Atomic writes: an interrupted write leaves the old file whole."""

from __future__ import annotations

import os

import pytest

from rescue_env.atomic import atomic_open, atomic_write_text


def test_an_interrupted_write_leaves_the_old_content_and_no_temporary_file(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("old line\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(path) as fh:
            fh.write("half a new li")
            raise KeyboardInterrupt
    assert path.read_text() == "old line\n"
    assert os.listdir(tmp_path) == ["data.jsonl"]


def test_a_write_replaces_the_file_and_keeps_its_mode(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("{}")
    path.chmod(0o640)
    atomic_write_text(path, '{"a": 1}')
    assert path.read_text() == '{"a": 1}'
    assert path.stat().st_mode & 0o777 == 0o640
    fresh = atomic_write_text(tmp_path / "new.json", "x")
    assert fresh.stat().st_mode & 0o777 == 0o644
