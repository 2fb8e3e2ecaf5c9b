"""Stopping the daemon: a Ctrl-C that also reaches a wrapper which then sends SIGTERM is one stop, logged once."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest

from gpuwatch.config.file import parse_config
from gpuwatch.daemon.compose import Parts
from gpuwatch.daemon.loop import Daemon


def test_the_second_stop_signal_is_not_news(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "gpuwatch")
    daemon = Daemon(parse_config({"runtime_dir": str(tmp_path)}), Parts(sources=[]))
    daemon.request_stop(signal.SIGINT)
    daemon.request_stop(signal.SIGTERM)
    assert daemon.stop_requested.is_set()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage().startswith("received")]
    assert said == [(logging.INFO, "received SIGINT, stopping"), (logging.DEBUG, "received SIGTERM, already stopping")]
