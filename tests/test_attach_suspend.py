"""The attach protocol's word for a run its user suspended (Ctrl-Z on `gpuwatch train`): ``Beat.suspended``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from gpuwatch.attach import Beat, ProtocolError, decode_request, encode
from tests.support.paths import REPO


def test_a_suspended_beat_round_trips_and_a_beat_without_the_key_is_a_running_one() -> None:
    beat = Beat(heartbeats=[{"pid": 1}], suspended=signal.SIGTSTP)
    assert decode_request(encode(beat)) == beat
    assert decode_request(encode(Beat())) == Beat(suspended=None)
    assert decode_request(b'{"cmd":"beat","heartbeats":[]}') == Beat()  # an older wrapper's


def test_it_is_only_a_key_of_a_beat_so_the_daemon_before_it_still_reads_the_beat() -> None:
    """The decoder of main before this key (git's copy, run as it was): the suspended Beat is a Beat to it,
    not an unknown command that would close the session."""
    line = encode(Beat(heartbeats=[{"pid": 1}], suspended=signal.SIGTSTP))
    assert json.loads(line)["cmd"] == "beat"
    old = subprocess.run(["git", "show", "ad57207:gpuwatch/attach.py"], cwd=REPO, capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip("no git history here")
    probe = f"{old.stdout}\nprint(repr(decode_request({line!r})))\n"
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert seen.stdout.strip() == "Beat(heartbeats=[{'pid': 1}], cmd='beat')", seen.stderr


def test_a_suspended_that_is_not_a_signal_number_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match=r"beat: suspended is not an integer in \[1, 65536\]"):
        decode_request(b'{"cmd":"beat","heartbeats":[],"suspended":"yes"}')
