"""Checkpoint completeness checks on real files, and the [[trainer]] config rules."""

from __future__ import annotations

import os
import tomllib
import zipfile
from pathlib import Path

import pytest

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import parse_config
from gpuwatch.supervise.checkpoint import incomplete_reason, newest_complete_checkpoint
from tests.support.paths import REPO


def _zip(path: Path, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"weights")
    os.utime(path, (mtime, mtime))
    return path


def test_newest_complete_wins_over_newer_truncated_and_empty(tmp_path: Path) -> None:
    good = _zip(tmp_path / "runs/detect/train/weights/last.pt", 1000)
    _zip(tmp_path / "runs/detect/old/weights/last.pt", 500)
    cut = tmp_path / "runs/detect/train2/weights/last.pt"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(good.read_bytes()[:-30])
    os.utime(cut, (2000, 2000))
    empty = tmp_path / "runs/detect/train3/weights/last.pt"
    empty.parent.mkdir(parents=True)
    empty.touch()
    assert newest_complete_checkpoint("runs/detect/*/weights/last.pt", tmp_path, settle_s=0) == good
    assert "zip" in (incomplete_reason(cut) or "") and incomplete_reason(empty) == "empty file"


def test_file_still_growing_is_skipped(tmp_path: Path) -> None:
    path = _zip(tmp_path / "a.pt", 1000)
    first_look = (path.stat().st_mtime, path.stat().st_size)
    with open(path, "ab") as handle:
        handle.write(b"more")
    assert "still being written" in (incomplete_reason(path, first_look) or "")


def test_no_match_is_none(tmp_path: Path) -> None:
    assert newest_complete_checkpoint("**/*.pt", tmp_path, settle_s=0) is None


def test_duplicate_trainer_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="'a' is used twice"):
        parse_config({"trainer": [{"name": "a", "command": ["x"]}, {"name": "a", "command": ["y"]}]})


def test_empty_command_is_refused() -> None:
    with pytest.raises(ConfigError, match="trainer.0.command"):
        parse_config({"trainer": [{"name": "a", "command": []}]})


def test_example_trainer_block_is_valid() -> None:
    text = (REPO / "config/gpuwatch.toml").read_text()
    start = text.index("# [[trainer]]")
    lines = [line[2:] for line in text[start:].splitlines() if line.startswith("# ") and not line.startswith("# #")]
    config = parse_config(tomllib.loads("\n".join(lines)))
    assert config.trainer[0].name == "yolo" and "{last_checkpoint}" in " ".join(config.trainer[0].restart_command or [])
