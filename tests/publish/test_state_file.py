"""The state file's write (publish/state.write_state_file): the bytes, the mode, the atomic rename, no link followed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.publish.state import parse, write_state_file

DOC: dict[str, Any] = {"schema": 1, "taken_unix": 1796598581.2388158, "name": "caf\u00e9 \u2603", "none": None,
                       "gpus": [{"gpu_id": "0000:12:00.0", "power_w": 36.0, "ok": True, "list": [1, 2.5, "x"]}]}


def test_written_as_compact_ascii_json(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state_file(path, DOC)
    data = path.read_bytes()
    assert data == json.dumps(DOC, separators=(",", ":")).encode("ascii")
    assert parse(data) == DOC
    write_state_file(path, {**DOC, "taken_unix": 2.0})
    assert json.loads(path.read_bytes())["taken_unix"] == 2.0  # replaced every tick
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no tmp left behind


def test_readable_by_all_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_state_file(tmp_path / "state.json", DOC)
    finally:
        os.umask(old)
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o644


def test_a_link_at_the_tmp_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / f".state-{os.getpid()}.tmp").symlink_to(victim)
    with pytest.raises(OSError):
        write_state_file(tmp_path / "state.json", DOC)
    assert victim.read_text() == "keep"
    assert not (tmp_path / "state.json").exists()


def test_a_document_that_cannot_be_encoded_leaves_the_last_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state_file(path, DOC)
    with pytest.raises(TypeError):
        write_state_file(path, {"bad": object()})
    assert json.loads(path.read_bytes()) == DOC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_the_directory_is_made_when_missing(tmp_path: Path) -> None:
    path = tmp_path / "run" / "state.json"
    write_state_file(path, DOC)
    assert json.loads(path.read_bytes()) == DOC
