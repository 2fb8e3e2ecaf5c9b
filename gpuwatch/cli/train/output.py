"""`gpuwatch train`'s copy of the command's output: every byte of its stdout goes on to the wrapper's stdout and
every byte of its stderr to the wrapper's stderr, unchanged (`gpuwatch train -- cmd 2>err.log` separates them as
`cmd 2>err.log` does), and both into one log in the run's own directory, which `gpuwatch logs NAME` shows
(docs/attached-runs.md).

The command writes into a pty where the wrapper's output is a terminal (isatty, tqdm's bars and line buffering
behave as on the terminal itself; the window size is passed on, again at each SIGWINCH), else into a pipe. Where
both the wrapper's stdout and stderr are terminals, one pty serves both (a terminal is one stream) and is copied
to stdout. A pty is not the command's controlling terminal (it runs in a session of its own, cli/train/run.py) and
its output processing is off (no ONLCR: the real terminal turns "\\n" into "\\r\\n" once, and the log keeps "\\n").

One thread a source reads it and writes it on (as fast as the terminal or pipe takes it); with two sources the
log gets each one's whole lines (a line's end held back up to ``CHUNK_BYTES``), interleaved in the order they were
read: as well as two pipes can tell. The log's writes go through a bounded queue to a thread of their own, so a
slow or full log disk never slows the command: what does not fit in the queue, or what a full disk refuses, is
lost with one line (in the log once it works again, and on stderr), never the run. An output that went away
(SIGHUP, EIO, EPIPE: the reader of `| head` exited) stops the copy to it only; its source is still read.

The log is rotated as a configured trainer's (``[[trainer]] log_max_bytes`` / ``log_backups``'s defaults,
``config.quick``; ``GPUWATCH_TRAIN_LOG_MAX_BYTES`` sets a smaller size, for tests): ``output.log``, then
``output.log.1``... as logging's RotatingFileHandler names them (what `gpuwatch logs` reads across). Each open goes
through ``safefs.open_regular`` (no link, no FIFO, only the user's own file), mode 0600.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pty
import queue
import select
import signal
import termios
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType

from gpuwatch.config.quick import TRAINER_LOG_BACKUPS, TRAINER_LOG_MAX_BYTES, TRAINER_LOG_MIN_BYTES
from gpuwatch.safefs import open_regular

LOG_MAX_BYTES_ENV = "GPUWATCH_TRAIN_LOG_MAX_BYTES"
QUEUE_MAX_BYTES = 8 * 1024 * 1024  # what the log may lag behind the command before output is dropped from it
CHUNK_BYTES = 64 * 1024
CLOSE_WAIT_S = 5.0  # at the end: how long the copy may take to drain (a daemonized grandchild keeps the pipe open)

Say = Callable[[str], None]


def log_max_bytes(environ: Mapping[str, str]) -> int:
    try:
        return max(TRAINER_LOG_MIN_BYTES, int(environ[LOG_MAX_BYTES_ENV]))
    except (KeyError, ValueError):
        return TRAINER_LOG_MAX_BYTES


class RotatingLog:
    """The run's log, appended to in bytes and rotated before ``max_bytes`` at a line's end (``backups`` older files
    kept). A write
    that fails is counted and said once; one more line when writes work again."""

    def __init__(self, path: Path, max_bytes: int, backups: int = TRAINER_LOG_BACKUPS,
                 say: Say = lambda line: None) -> None:
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self.lost_bytes = 0
        self._say = say
        self._fd: int | None = None
        self._size = 0
        self._failing = False

    def write(self, data: bytes) -> None:
        try:
            if self._failing:  # where the lost output was: said first, in the log, once it can be written
                self._append(f"[gpuwatch train: {self.lost_bytes} bytes of output lost here: the log could not be "
                             "written]\n".encode())
                self._failing = False
                self._say(f"gpuwatch train: the run's log {self.path} is writable again ({self.lost_bytes} bytes "
                          "lost)")
            self._append(data)
        except OSError as exc:
            self.lost_bytes += len(data)
            if not self._failing:
                self._failing = True
                self._say(f"gpuwatch train: cannot write the run's log {self.path} ({exc.strerror or exc}): its "
                          "output is lost from the log until writes work again; the run goes on")

    def _append(self, data: bytes) -> None:
        while data:
            fd = self._open()
            room = self.max_bytes - self._size
            # Whole lines, as RotatingFileHandler rotates between records (`gpuwatch logs -n` counts lines across
            # the files); only a line longer than a whole file is cut.
            cut = len(data) if len(data) <= room else data.rfind(b"\n", 0, max(room, 0)) + 1
            if cut == 0 and self._size > 0:
                self._rotate()
                continue
            written = os.write(fd, data[:cut or room])
            self._size += written
            data = data[written:]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600,
                                    owners=(os.geteuid(),))
            self._size = os.fstat(self._fd).st_size
        return self._fd

    def _rotate(self) -> None:
        """As RotatingFileHandler: ``.1`` is the newest of the old files; rename(2) never writes through a link."""
        self.close()
        if self.backups > 0:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if os.path.lexists(older):
                    os.rename(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            os.rename(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            os.unlink(self.path)


class _Stream:
    """One of the command's two outputs: what it writes (``child_fd``) read from ``read_fd``, copied to ``out_fd``
    (the wrapper's own stdout or stderr). ``partial``: the end of the last read that was no whole line yet (what
    the log waits for, so the two outputs interleave in it by whole lines)."""

    def __init__(self, read_fd: int, child_fd: int, out_fd: int, terminal: bool, name: str) -> None:
        self.read_fd, self.child_fd, self.out_fd, self.terminal, self.name = read_fd, child_fd, out_fd, terminal, name
        self.out_ok = True
        self.partial = b""


class OutputCopy:
    """The command's stdout and stderr (``child_fds``: give them to the command as its fds 1 and 2), copied to
    ``out_fd`` and ``err_fd`` and to ``log``. ``start`` in the main thread (it takes SIGWINCH), ``close`` once the
    last command ended.

    Each of the wrapper's two outputs that is a terminal gets a pty, the others a pipe; both a terminal: one pty
    for both (a terminal is one stream, as on the terminal itself), copied to ``out_fd``. Each source has a
    reader thread of its own, so a stdout whose reader stalls never holds the stderr copy up."""

    def __init__(self, log: RotatingLog, out_fd: int = 1, say: Say = lambda line: None, err_fd: int = 2) -> None:
        self._log, self._say = log, say
        out_terminal, err_terminal = _isatty(out_fd), _isatty(err_fd)
        self._streams: list[_Stream] = []
        try:
            stdout = self._open(out_fd, out_terminal, "stdout")
            stderr = stdout if out_terminal and err_terminal else self._open(err_fd, err_terminal, "stderr")
        except OSError:
            self._close_all()
            raise
        self.child_fds = (stdout.child_fd, stderr.child_fd)
        self._whole_lines = len(self._streams) > 1  # one source: every byte as it comes (a progress bar's "\\r")
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self._queued_bytes = 0
        self._dropped_bytes = 0
        self._lock = threading.Lock()
        self._readers = [threading.Thread(target=self._read, args=(stream,), name=f"output-{stream.name}",
                                          daemon=True) for stream in self._streams]
        self._writer = threading.Thread(target=self._write_log, name="output-log", daemon=True)
        self._previous_winch: object = None

    def _open(self, out_fd: int, terminal: bool, name: str) -> _Stream:
        if terminal:
            read_fd, child_fd = pty.openpty()
            try:
                attributes = termios.tcgetattr(child_fd)
                attributes[1] &= ~termios.OPOST  # oflag: the bytes as written (the real terminal maps "\n" itself)
                termios.tcsetattr(child_fd, termios.TCSANOW, attributes)
            except termios.error:  # the pty's default ONLCR: the log gets "\r\n", nothing is lost
                pass
        else:
            read_fd, child_fd = os.pipe()
        os.set_inheritable(read_fd, False)
        stream = _Stream(read_fd, child_fd, out_fd, terminal, name)
        self._streams.append(stream)
        if terminal:
            _window(stream)
        return stream

    def _close_all(self) -> None:
        for stream in self._streams:
            for fd in (stream.read_fd, stream.child_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def start(self) -> OutputCopy:
        terminal = any(stream.terminal for stream in self._streams)
        if terminal and threading.current_thread() is threading.main_thread():
            self._previous_winch = signal.signal(signal.SIGWINCH, self._on_winch)
        for reader in self._readers:
            reader.start()
        self._writer.start()
        return self

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """The command's ends closed here: what it wrote is copied to the end, then the log closed."""
        if self._previous_winch is not None:
            signal.signal(signal.SIGWINCH, self._previous_winch)  # type: ignore[arg-type]
            self._previous_winch = None
        for stream in self._streams:
            os.close(stream.child_fd)
        for reader in self._readers:
            reader.join(wait_s)
        self._queue.put(None)
        self._writer.join(wait_s)
        self._log.close()

    def _read(self, stream: _Stream) -> None:
        while True:
            try:
                data = os.read(stream.read_fd, CHUNK_BYTES)
            except InterruptedError:
                continue
            except OSError:  # EIO: a pty whose every slave end closed (the command and the wrapper's are gone)
                break
            if not data:
                break
            self._copy(stream, data)
            if self._whole_lines:
                data, stream.partial = split_lines(stream.partial + data, CHUNK_BYTES)
            self._to_log(data)
        self._to_log(stream.partial)
        os.close(stream.read_fd)

    def _to_log(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            if self._queued_bytes + len(data) > QUEUE_MAX_BYTES:
                self._dropped_bytes += len(data)
                return
            self._queued_bytes += len(data)
        self._queue.put(data)

    def _copy(self, stream: _Stream, data: bytes) -> None:
        view = memoryview(data)
        while stream.out_ok and view:
            try:
                view = view[os.write(stream.out_fd, view):]
            except InterruptedError:
                continue
            except BlockingIOError:  # a non-blocking stdout (rare): wait for it as a terminal would make us
                select.select([], [stream.out_fd], [], 1.0)
            except OSError as exc:  # EIO: the terminal hung up; EPIPE: the reader of a pipe went away
                stream.out_ok = False
                self._to_log(f"[gpuwatch train: {stream.name} closed ({errno.errorcode.get(exc.errno or 0, exc)}): "
                             f"the output to it goes on in this log only]\n".encode())

    def _write_log(self) -> None:
        while (data := self._queue.get()) is not None:
            with self._lock:
                self._queued_bytes -= len(data)
                dropped, self._dropped_bytes = self._dropped_bytes, 0
            if dropped:
                self._say(f"gpuwatch train: the run's log fell behind: {dropped} bytes of output not kept in it")
                self._log.write(f"[gpuwatch train: {dropped} bytes of output lost here: the log fell behind]\n"
                                .encode())
            self._log.write(data)

    def _on_winch(self, signum: int, frame: FrameType | None) -> None:
        for stream in self._streams:
            if stream.terminal:
                _window(stream)


def split_lines(data: bytes, max_partial_bytes: int) -> tuple[bytes, bytes]:
    """``data`` as its whole lines and the rest (kept for the next read); a rest over ``max_partial_bytes`` (a
    progress bar's "\r" updates, a line with no end) goes out as it is: what is held is bounded."""
    cut = data.rfind(b"\n") + 1
    if len(data) - cut > max_partial_bytes:
        return data, b""
    return data[:cut], data[cut:]


def _window(stream: _Stream) -> None:
    """The terminal's window size on its pty (TIOCGWINSZ / TIOCSWINSZ, ioctl_tty(2))."""
    try:
        size = fcntl.ioctl(stream.out_fd, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(stream.child_fd, termios.TIOCSWINSZ, size)
    except OSError:
        pass


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False

