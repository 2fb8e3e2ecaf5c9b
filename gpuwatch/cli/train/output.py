"""`gpuwatch train`'s copy of the command's output: every byte of its stdout and stderr goes on to the wrapper's
stdout unchanged and into a log in the run's own directory, which `gpuwatch logs NAME` shows (docs/attached-runs.md).

The command writes into a pty when the wrapper's stdout is a terminal (isatty, tqdm's bars and line buffering
behave as on the terminal itself; the window size is passed on, again at each SIGWINCH), else into a pipe. The pty
is not the command's controlling terminal (it runs in a session of its own, cli/train/run.py) and its output
processing is off (no ONLCR: the real terminal turns "\\n" into "\\r\\n" once, and the log keeps "\\n").

One thread reads and writes to the wrapper's stdout (as fast as the terminal takes it, as before); the log's
writes go through a bounded queue to a thread of their own, so a slow or full log disk never slows the command:
what does not fit in the queue, or what a full disk refuses, is lost with one line (in the log once it works again,
and on stderr), never the run. A terminal that went away (SIGHUP, EIO, EPIPE) stops the copy to stdout only.

The log is rotated as a configured trainer's (``[[trainer]] log_max_bytes`` / ``log_backups``'s defaults,
``config.quick``; ``GPUWATCH_TRAIN_LOG_MAX_BYTES`` sets a smaller size, for tests): ``output.log``, then
``output.log.1``... as logging's RotatingFileHandler names them (what `gpuwatch logs` reads across). Each open goes
through ``safefs.open_regular`` (no link, no FIFO, only the user's own file), mode 0600.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import queue
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


class OutputCopy:
    """The command's stdout and stderr (``child_fd``: give it to the command as both), copied to ``out_fd`` and
    ``log``. ``start`` in the main thread (it takes SIGWINCH), ``close`` once the last command ended."""

    def __init__(self, log: RotatingLog, out_fd: int = 1, say: Say = lambda line: None) -> None:
        self._log, self._out_fd, self._say = log, out_fd, say
        self._terminal = _isatty(out_fd)
        if self._terminal:
            self._read_fd, self.child_fd = pty.openpty()
            try:
                attributes = termios.tcgetattr(self.child_fd)
                attributes[1] &= ~termios.OPOST  # oflag: the bytes as written (the real terminal maps "\n" itself)
                termios.tcsetattr(self.child_fd, termios.TCSANOW, attributes)
            except termios.error:  # the pty's default ONLCR: the log gets "\r\n", nothing is lost
                pass
            self._window()
        else:
            self._read_fd, self.child_fd = os.pipe()
        os.set_inheritable(self._read_fd, False)
        self._out_ok = True
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self._queued_bytes = 0
        self._dropped_bytes = 0
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="output-copy", daemon=True)
        self._writer = threading.Thread(target=self._write_log, name="output-log", daemon=True)
        self._previous_winch: object = None

    def start(self) -> OutputCopy:
        if self._terminal and threading.current_thread() is threading.main_thread():
            self._previous_winch = signal.signal(signal.SIGWINCH, self._on_winch)
        self._reader.start()
        self._writer.start()
        return self

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """The command's end of the pipe closed here: what it wrote is copied to the end, then the log closed."""
        if self._previous_winch is not None:
            signal.signal(signal.SIGWINCH, self._previous_winch)  # type: ignore[arg-type]
            self._previous_winch = None
        os.close(self.child_fd)
        self._reader.join(wait_s)
        self._queue.put(None)
        self._writer.join(wait_s)
        self._log.close()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, CHUNK_BYTES)
            except InterruptedError:
                continue
            except OSError:  # EIO: a pty whose every slave end closed (the command and the wrapper's are gone)
                break
            if not data:
                break
            self._to_stdout(data)
            with self._lock:
                if self._queued_bytes + len(data) > QUEUE_MAX_BYTES:
                    self._dropped_bytes += len(data)
                    continue
                self._queued_bytes += len(data)
            self._queue.put(data)
        os.close(self._read_fd)

    def _to_stdout(self, data: bytes) -> None:
        view = memoryview(data)
        while self._out_ok and view:
            try:
                view = view[os.write(self._out_fd, view):]
            except InterruptedError:
                continue
            except BlockingIOError:  # a non-blocking stdout (rare): wait for it as a terminal would make us
                import select

                select.select([], [self._out_fd], [], 1.0)
            except OSError as exc:  # EIO: the terminal hung up; EPIPE: the reader of a pipe went away
                self._out_ok = False
                self._log.write(f"[gpuwatch train: stdout closed ({errno.errorcode.get(exc.errno or 0, exc)}): the "
                                "output goes on in this log only]\n".encode())

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

    def _window(self) -> None:
        try:
            size = fcntl.ioctl(self._out_fd, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(self.child_fd, termios.TIOCSWINSZ, size)
        except OSError:
            pass

    def _on_winch(self, signum: int, frame: FrameType | None) -> None:
        self._window()


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False

