"""Issue 46 items 1 and 2: what a trainer's user puts in its own (chowned) directory never makes root write
through it, nor blocks or bloats the tick. A real unprivileged user makes the link, FIFO or huge file; root
then opens the log (as at a restart or a rotation) or reads the heartbeats (as every tick does)."""

from __future__ import annotations

import os
import pwd
import re
import resource
import stat
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from gpuwatch.heartbeat import HEARTBEAT_MAX_BYTES, Heartbeat, read_heartbeat, read_rank_heartbeats, write_heartbeat
from gpuwatch.safefs import Unsafe, read_bounded
from gpuwatch.supervise.leftovers import RECORD, read_record
from gpuwatch.supervise.output import file_logger
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes, free_port
from tests.support.stack import GPUWATCH
from tests.support.users import needs_root, run_as, unprivileged_user
from tests.support.waiting import wait_for

pytestmark = needs_root


def _their_dir(tmp_path: Path, user: str) -> Path:
    """A trainer's directory as the supervisor leaves it: root's parent, the directory chowned to the user."""
    os.chmod(tmp_path, 0o755)
    directory = tmp_path / "trainers" / "t"
    directory.mkdir(parents=True)
    entry = pwd.getpwnam(user)
    os.chown(directory, entry.pw_uid, entry.pw_gid)
    return directory


@pytest.mark.parametrize("target", ["shadow", "new-file"])
def test_a_log_replaced_by_a_link_is_refused_never_written_through(tmp_path: Path, root_only: Path,
                                                                   target: str) -> None:
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        assert run_as(user, ["ln", "-s", str(root_only / target), str(directory / "t.log")]).returncode == 0
        with pytest.raises(Unsafe, match="symbolic link"):
            file_logger(directory / "t.log", 1_000_000, 2)
    assert (root_only / "shadow").read_text() == "root's\n"
    assert not (root_only / "new-file").exists()


def test_a_log_replaced_by_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        assert run_as(user, ["mkfifo", str(directory / "t.log")]).returncode == 0
        with pytest.raises(Unsafe, match="FIFO"):
            file_logger(directory / "t.log", 1_000_000, 2)  # O_NONBLOCK: no reader, refused at once


def test_a_rotation_into_a_planted_link_loses_output_and_writes_nothing_as_root(tmp_path: Path,
                                                                                root_only: Path) -> None:
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        logger = file_logger(directory / "t.log", 200, 1)
        logger.info("first")
        run_as(user, ["rm", "-f", str(directory / "t.log")])
        assert run_as(user, ["ln", "-s", str(root_only / "shadow"), str(directory / "t.log")]).returncode == 0
        for i in range(50):  # past max_bytes: the rotation reopens t.log
            logger.info("line %d", i)
        for handler in logger.handlers:
            handler.close()
    assert (root_only / "shadow").read_text() == "root's\n"


def test_the_users_own_regular_log_is_appended_to(tmp_path: Path) -> None:
    """A log the trainer's user made itself is its own file: appending the run's output to it is harmless."""
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        assert run_as(user, ["touch", str(directory / "t.log")]).returncode == 0
        logger = file_logger(directory / "t.log", 1_000_000, 2)
        logger.info("hello")
        for handler in logger.handlers:
            handler.close()
        assert (directory / "t.log").read_text() == "hello\n"


def test_a_fifo_heartbeat_costs_nothing_and_is_counted(tmp_path: Path) -> None:
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        assert run_as(user, ["mkfifo", str(directory / "heartbeat.json")]).returncode == 0
        assert run_as(user, ["mkfifo", str(directory / "heartbeat.rank-0.json")]).returncode == 0
        problems: list[str] = []
        started = time.monotonic()
        assert read_heartbeat(directory / "heartbeat.json", problems) is None
        assert read_rank_heartbeats(directory / "heartbeat.json", problems) == []
        assert time.monotonic() - started < 30  # a blocking open never returns: any bound tells them apart
        assert len(problems) == 2 and all("FIFO" in p for p in problems)


def test_a_huge_heartbeat_is_refused_unread(tmp_path: Path) -> None:
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        huge = directory / "heartbeat.json"
        assert run_as(user, ["truncate", "-s", "300M", str(huge)]).returncode == 0
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        problems: list[str] = []
        assert read_heartbeat(huge, problems) is None
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: not read
        assert problems and f"{HEARTBEAT_MAX_BYTES}-byte bound" in problems[0]


def test_a_link_heartbeat_is_refused_and_a_real_one_is_read(tmp_path: Path, root_only: Path) -> None:
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        assert run_as(user, ["ln", "-s", str(root_only / "shadow"), str(directory / "heartbeat.json")]).returncode == 0
        problems: list[str] = []
        assert read_heartbeat(directory / "heartbeat.json", problems) is None and "symbolic link" in problems[0]
        os.unlink(directory / "heartbeat.json")
        write_heartbeat(directory / "heartbeat.json", Heartbeat(pid=1, steps_total=3, last_step_unix=None,
                                                                 steps_per_s=None, updated_unix=1.0))
        beat = read_heartbeat(directory / "heartbeat.json")
        assert beat is not None and beat.steps_total == 3


def test_a_run_record_the_user_wrote_is_not_trusted(tmp_path: Path) -> None:
    """The run record names the pids a later daemon stops: only root's own record counts."""
    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        forged = ('{"trainer": "t", "pid": 1, "create_time": 0, "run_id": "x", "daemon_pid": 1, '
                  '"started_unix": 0}')
        assert run_as(user, ["sh", "-c", f"printf '%s' '{forged}' > {directory / RECORD}"]).returncode == 0
        assert read_record(directory) is None
        with pytest.raises(Unsafe, match="owned by uid"):
            read_bounded(directory / RECORD, owners=(0,))


def test_gpuwatch_logs_refuses_a_fifo_or_link_log_without_blocking(tmp_path: Path, root_only: Path) -> None:
    """Root's `gpuwatch logs NAME` reads the same file: never through a link, never blocking on a FIFO."""
    from gpuwatch.cli.logs import _open as open_log
    from gpuwatch.cli.logs import last_lines

    with unprivileged_user() as user:
        directory = _their_dir(tmp_path, user)
        assert run_as(user, ["mkfifo", str(directory / "t.log")]).returncode == 0
        with pytest.raises(Unsafe, match="FIFO"):
            open_log(directory / "t.log")
        assert run_as(user, ["ln", "-s", str(root_only / "shadow"), str(directory / "t.log.1")]).returncode == 0
        with pytest.raises(Unsafe, match="symbolic link"):
            last_lines(None, directory / "t.log", 10)


def test_a_real_trainers_fifo_heartbeat_is_counted_published_and_shown(tmp_path: Path) -> None:
    """A configured trainer running as its user makes its own heartbeat a FIFO: the daemon keeps ticking, counts
    the refused reads per trainer in the status document and on /metrics, and `gpuwatch status` says so."""
    with unprivileged_user() as user, Processes(tmp_path / "logs") as processes:
        port = free_port()
        # The trainer's own shell makes the FIFO where the supervisor tells it to beat, then runs on.
        command = '["/bin/sh", "-c", "rm -f \\"$GPUWATCH_HEARTBEAT_FILE\\" && mkfifo \\"$GPUWATCH_HEARTBEAT_FILE\\" ' \
                  '&& exec sleep 600"]'
        daemon = DaemonProcess(processes, tmp_path, tmp_path / "tree",
                               f'interval_s = 0.2\n[http]\nlisten = "127.0.0.1"\nport = {port}\n'
                               f'[simulate]\nenabled = true\ntree_dir = "{tmp_path / "tree"}"\n'
                               f'[[trainer]]\nname = "t"\ncommand = {command}\ncwd = "{tmp_path}"\n'
                               f'user = "{user}"\n')
        heartbeat = daemon.runtime / "trainers" / "t" / "heartbeat.json"
        wait_for(lambda: stat.S_ISFIFO(heartbeat.lstat().st_mode), "the trainer's FIFO heartbeat", 60,
                 ignore=(OSError,), detail=daemon.child.tail)
        document = daemon.wait_state(lambda d: d["trainers"][0]["heartbeat_read_errors_total"] >= 2,
                                     "refused heartbeat reads counted", 60)
        ticks = document["daemon"]["ticks_total"]
        daemon.wait_state(lambda d: d["daemon"]["ticks_total"] >= ticks + 5, "the loop ticking on", 60)
        assert daemon.log().count("heartbeat unreadable") == 1, daemon.log()  # once per episode, not per tick
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            metrics = answer.read().decode()
        found = re.search(r'^gpuwatch_trainer_heartbeat_read_errors_total\{trainer="t"\} (\d+)', metrics, re.M)
        assert found is not None and int(found.group(1)) >= 2, metrics
        shown = subprocess.run([*GPUWATCH, "status", "--color", "never", "-c", str(daemon.config)],
                               capture_output=True, text=True, timeout=60)
        assert re.search(r"heartbeat unreadable \d+ times \(not a regular file", shown.stdout), shown.stdout
        assert daemon.stop() == 0, daemon.child.tail()
