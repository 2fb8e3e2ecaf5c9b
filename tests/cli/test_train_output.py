"""`gpuwatch train`'s copy of its command's output (cli/train/output.py): the log rotated at whole lines, a full
disk (a real tmpfs) losing log bytes with one line, a link refused, a pty when stdout is a terminal (isatty, the
window size and its change), two pipes otherwise (stdout and stderr apart, the log by whole lines in the order
read), a closed stdout costing the copy to it only."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuwatch.attach import LOG_PATH_MAX_BYTES, Attach, ProtocolError, decode_request, encode
from gpuwatch.cli.train.output import OutputCopy, RotatingLog, log_max_bytes, split_lines
from gpuwatch.config.quick import TRAINER_LOG_MAX_BYTES, TRAINER_LOG_MIN_BYTES
from gpuwatch.safefs import Unsafe
from tests.support.users import needs_root


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, TRAINER_LOG_MAX_BYTES),
    ({"GPUWATCH_TRAIN_LOG_MAX_BYTES": "8192"}, 8192),
    ({"GPUWATCH_TRAIN_LOG_MAX_BYTES": "1"}, TRAINER_LOG_MIN_BYTES),
    ({"GPUWATCH_TRAIN_LOG_MAX_BYTES": "lots"}, TRAINER_LOG_MAX_BYTES),
])
def test_the_size_is_the_trainer_logs_unless_set_smaller(environ: dict[str, str], expected: int) -> None:
    assert log_max_bytes(environ) == expected


def test_rotation_keeps_whole_lines_and_the_backups_count(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "output.log", 100, backups=2)
    lines = [f"line {i:03d} .......\n".encode() for i in range(40)]  # 20 bytes each: 5 to a file
    for start in range(0, 40, 3):
        log.write(b"".join(lines[start:start + 3]))  # chunks that do not end where a file does
    log.close()
    files = [tmp_path / "output.log.2", tmp_path / "output.log.1", tmp_path / "output.log"]
    assert sorted(tmp_path.iterdir()) == sorted(files)
    assert b"".join(f.read_bytes() for f in files) == b"".join(lines[-15:])
    assert all(f.stat().st_size <= 100 and f.read_bytes().endswith(b"\n") for f in files)
    assert all(os.stat(f).st_mode & 0o777 == 0o600 for f in files)


def test_a_line_longer_than_a_file_is_cut_and_none_is_lost(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "output.log", 100, backups=5)
    log.write(b"short\n" + b"x" * 250 + b"\n")
    log.close()
    kept = b"".join((tmp_path / name).read_bytes() for name in ("output.log.3", "output.log.2", "output.log.1",
                                                                 "output.log"))
    assert kept == b"short\n" + b"x" * 250 + b"\n"


def test_a_link_in_the_logs_place_is_refused_once_and_the_writes_go_on(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    (tmp_path / "output.log").symlink_to(target)
    said: list[str] = []
    log = RotatingLog(tmp_path / "output.log", 4096, say=said.append)
    log.write(b"one\n")
    log.write(b"two\n")
    assert target.read_bytes() == b"" and log.lost_bytes == 8
    assert len(said) == 1 and "cannot write the run's log" in said[0] and "symbolic link" in said[0]
    with pytest.raises(Unsafe):
        log._open()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@needs_root
def test_a_full_disk_loses_log_bytes_with_one_line_then_says_when_writes_work_again(small_tmpfs: Path) -> None:
    said: list[str] = []
    log = RotatingLog(small_tmpfs / "output.log", 1024 * 1024, say=said.append)
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"f" * 60 * 1024)
    for _ in range(20):
        log.write(b"y" * 1000 + b"\n")  # never raises
    assert log.lost_bytes > 0 and len(said) == 1 and "cannot write the run's log" in said[0], said
    filler.unlink()
    log.write(b"after\n")
    log.close()
    assert len(said) == 2 and "writable again" in said[1]
    text = (small_tmpfs / "output.log").read_bytes()
    assert text.endswith(b"after\n") and b"bytes of output lost here" in text


def _python(code: str, fds: tuple[int, int], *args: str) -> int:
    return subprocess.run([sys.executable, "-c", code, *args], stdout=fds[0], stderr=fds[1], timeout=120).returncode


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk


def test_through_a_pty_when_stdout_is_a_terminal_with_its_window_size(tmp_path: Path) -> None:
    terminal, terminal_side = pty.openpty()  # the wrapper's stdout: a terminal of 30 rows, 100 columns
    fcntl.ioctl(terminal_side, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    copy = OutputCopy(RotatingLog(tmp_path / "output.log", 1 << 20), terminal_side, err_fd=terminal_side).start()
    try:
        assert copy.child_fds[0] == copy.child_fds[1]  # one stream, as the terminal is
        code = "import os, sys; print(sys.stdout.isatty(), os.get_terminal_size()); print('err', file=sys.stderr)"
        assert _python(code, copy.child_fds) == 0
        fcntl.ioctl(terminal_side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.kill(os.getpid(), signal.SIGWINCH)  # the terminal's resize: passed on
        assert _python("import os; print(os.get_terminal_size())", copy.child_fds) == 0
    finally:
        copy.close()
    os.close(terminal_side)
    shown = _read_all(terminal)
    os.close(terminal)
    kept = (tmp_path / "output.log").read_bytes()
    expected = (b"True os.terminal_size(columns=100, lines=30)\nerr\n"
                b"os.terminal_size(columns=120, lines=40)\n")
    assert kept == expected  # "\n" as written: the pty's output processing is off
    assert shown.replace(b"\r\n", b"\n") == expected  # the terminal maps "\n" itself


def test_through_a_pipe_otherwise_and_a_closed_stdout_costs_only_the_copy_to_it(tmp_path: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # the reader of `gpuwatch train ... | head` went away
    err_reader, err_writer = os.pipe()
    stderr_copy = ThreadPoolExecutor(1).submit(_read_all, err_reader)  # the wrapper's stderr, read as it comes
    said: list[str] = []
    copy = OutputCopy(RotatingLog(tmp_path / "output.log", 1 << 20), writer, said.append, err_writer).start()
    try:
        code = "import sys\nfor i in range(3): print(i, sys.stdout.isatty())\nprint('e' * 300000, file=sys.stderr)"
        assert _python(code, copy.child_fds) == 0  # more than a pipe holds, to stderr too
    finally:
        copy.close()
        os.close(writer)
        os.close(err_writer)
    assert stderr_copy.result(60) == b"e" * 300000 + b"\n"  # the copy to stderr went on
    os.close(err_reader)
    kept = (tmp_path / "output.log").read_bytes()
    # The two pipes are read by their own threads, and a line longer than CHUNK_BYTES goes to the log in parts:
    # the note and stdout's one write may land anywhere in stderr's long line, each whole and once.
    note = re.search(rb"\[gpuwatch train: stdout closed \(EPIPE\)[^\n]*\n", kept)
    assert note is not None
    rest = kept.replace(note.group(), b"", 1).replace(b"0 False\n1 False\n2 False\n", b"", 1)
    assert rest == b"e" * 300000 + b"\n"


# The child writes one line, then waits until the log holds it (the copy read it) before it writes the next: the
# order in which two pipes were read is the log's order. A line written in two parts is kept whole in the log.
_INTERLEAVED = """
import os, sys, time
def kept(text):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(sys.argv[1]) and text.encode() in open(sys.argv[1], "rb").read():
            return
        time.sleep(0.01)
for i, stream in enumerate([sys.stdout, sys.stderr, sys.stderr, sys.stdout, sys.stderr]):
    print(i, stream.name, file=stream, flush=True)
    kept(f"{i} {stream.name}")
sys.stdout.write("half a "); sys.stdout.flush()
print("err between", file=sys.stderr, flush=True)
kept("err between")
print("line", flush=True)
"""


def test_through_two_pipes_stdout_and_stderr_stay_apart_and_the_log_keeps_both_by_whole_lines(tmp_path: Path) -> None:
    (out_reader, out_writer), (err_reader, err_writer) = os.pipe(), os.pipe()
    log_file = tmp_path / "output.log"
    copy = OutputCopy(RotatingLog(log_file, 1 << 20), out_writer, err_fd=err_writer).start()
    try:
        assert copy.child_fds[0] != copy.child_fds[1]
        assert _python(_INTERLEAVED, copy.child_fds, str(log_file)) == 0
    finally:
        copy.close()
        os.close(out_writer)
        os.close(err_writer)
    assert _read_all(out_reader) == b"0 <stdout>\n3 <stdout>\nhalf a line\n"
    assert _read_all(err_reader) == b"1 <stderr>\n2 <stderr>\n4 <stderr>\nerr between\n"
    os.close(out_reader)
    os.close(err_reader)
    assert log_file.read_bytes() == (b"0 <stdout>\n1 <stderr>\n2 <stderr>\n3 <stdout>\n4 <stderr>\nerr between\n"
                                     b"half a line\n")


def test_a_terminal_stdout_gets_a_pty_and_a_redirected_stderr_a_pipe_of_its_own(tmp_path: Path) -> None:
    terminal, terminal_side = pty.openpty()
    err_reader, err_writer = os.pipe()
    copy = OutputCopy(RotatingLog(tmp_path / "output.log", 1 << 20), terminal_side, err_fd=err_writer).start()
    try:
        code = "import sys; print(sys.stdout.isatty(), flush=True); print(sys.stderr.isatty(), file=sys.stderr)"
        assert _python(code, copy.child_fds) == 0
    finally:
        copy.close()
        os.close(terminal_side)
        os.close(err_writer)
    assert _read_all(terminal).replace(b"\r\n", b"\n") == b"True\n"
    assert _read_all(err_reader) == b"False\n"
    os.close(terminal)
    os.close(err_reader)
    assert sorted((tmp_path / "output.log").read_bytes().splitlines()) == [b"False", b"True"]


@pytest.mark.parametrize(("data", "whole", "rest"), [
    (b"", b"", b""),
    (b"a\nb", b"a\n", b"b"),
    (b"a\nb\n", b"a\nb\n", b""),
    (b"no end yet", b"", b"no end yet"),
    (b"\r10%\r20%\r30%", b"", b"\r10%\r20%\r30%"),  # a progress bar: held while it is short
    (b"x" * 17, b"x" * 17, b""),  # over the bound: out as it is
    (b"a\n" + b"x" * 17, b"a\n" + b"x" * 17, b""),
])
def test_the_log_waits_for_a_lines_end_up_to_a_bound(data: bytes, whole: bytes, rest: bytes) -> None:
    assert split_lines(data, 16) == (whole, rest)


@pytest.mark.parametrize(("path", "problem"), [
    ("run/output.log", "not an absolute path"),
    ("/r/" + "é" * 2047, "over 4096 bytes"),
    ("/r/\x1b[2Joutput.log", "control characters"),
])
def test_the_daemons_decoder_refuses_a_log_path_it_would_not_publish(path: str, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        decode_request(encode(Attach(pid=1, argv=["x"], log_path=path)))


def test_an_absolute_printable_log_path_is_taken_and_an_older_wrappers_none() -> None:
    path = "/run/user/1000/gpuwatch/runs/1-x/output.log"
    assert decode_request(encode(Attach(pid=1, argv=["x"], log_path=path))) == Attach(pid=1, argv=["x"],
                                                                                     log_path=path)
    assert decode_request(b'{"cmd":"attach","pid":1,"argv":["x"]}') == Attach(pid=1, argv=["x"])
    assert len(("/" + "a" * (LOG_PATH_MAX_BYTES - 1)).encode()) == LOG_PATH_MAX_BYTES
    assert decode_request(encode(Attach(pid=1, argv=["x"], log_path="/" + "a" * (LOG_PATH_MAX_BYTES - 1))))
