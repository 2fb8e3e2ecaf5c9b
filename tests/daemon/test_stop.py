"""Stopping the daemon: a Ctrl-C that also reaches a wrapper which then sends SIGTERM is one stop, logged once
(by the loop, never by the signal handler)."""

from __future__ import annotations

import logging
import signal
import threading
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
    # The handlers log nothing (logging takes locks): the loop says it, here on its way out.
    assert not [r for r in caplog.records if r.getMessage().startswith("received")]
    loop = threading.Thread(target=daemon.run)  # not the main thread: pytest's own handlers stay
    loop.start()
    loop.join(30)
    assert not loop.is_alive()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage().startswith("received")]
    assert said == [(logging.INFO, "received SIGINT, stopping"), (logging.DEBUG, "received SIGTERM, already stopping")]
