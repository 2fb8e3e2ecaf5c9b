"""Issue 31 point 2, in the actuation layer: an actuator keeps what it recorded. A record removed from the
file behind its back (`gpuwatch restore --force` beside the daemon) is written again before its next
write, and its own restore gives back what it holds even when the file lost it; a record that cannot be
removed after its hand-back (read-only directory) is a warning, not an exception. Real files; the
end-to-end case with real processes is tests/e2e/test_runtime_lock.py."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gpuwatch.actuation.actuator import Actuator
from tests.test_actuation import Kind, _record


def test_a_removed_record_is_written_again_before_the_next_write(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    actuator = Actuator(Kind({"a": "handed back"}).kind(), tmp_path, deadline_s=5.0)
    actuator.record("a", _record())
    actuator.file.clear()  # what `gpuwatch restore --force` leaves
    seen: list[object] = []
    with caplog.at_level(logging.WARNING, logger="gpuwatch"):
        actuator.run({"a": lambda: seen.append(actuator.recorded())})
    assert seen == [{"a": {"backend": "test", "value": 1}}]  # on file before the call ran
    assert "recorded again before the next write" in caplog.text
    assert actuator.restore_all().done == ["a: handed back"]
    assert not actuator.file.path.exists()


def test_the_restore_gives_back_what_it_holds_when_the_file_lost_it(tmp_path: Path) -> None:
    actuator = Actuator(Kind({"a": "handed back"}).kind(), tmp_path, deadline_s=5.0)
    actuator.record("a", _record())
    actuator.file.clear()
    assert actuator.restore_all().done == ["a: handed back"]
    assert actuator.restore_all().done == []  # given back once


def test_a_record_that_cannot_be_removed_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    actuator = Actuator(Kind({"a": "handed back"}).kind(), tmp_path / "run", deadline_s=5.0)
    actuator.record("a", _record())
    (tmp_path / "run").chmod(0o555)
    try:
        if os.access(tmp_path / "run", os.W_OK):
            pytest.skip("root writes into a 0555 directory: the read-only case is tests/e2e/test_runtime_dir_full.py")
        with caplog.at_level(logging.WARNING, logger="gpuwatch"):
            assert actuator.restore_all().done == ["a: handed back"]
        assert "handed back, but its record stays in" in caplog.text
        assert actuator.restore_all().done == []  # not handed back twice by this process
    finally:
        (tmp_path / "run").chmod(0o755)
        actuator.file.clear()
