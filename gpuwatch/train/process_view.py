"""How a launched script looks from outside: its command line in process views and its tracebacks, without gpuwatch.

Under ``gpuwatch train`` the script runs as ``python .../gpuwatch/train/bootstrap.py --conv2d-fallback auto ...
train.py ARGS``: ps, htop, nvtop and `gpuwatch status --processes` (which cuts rows at 160 columns) showed the
launcher's path where the user looks for their script, and every traceback of the script began with the launcher's
frames (bootstrap.py, launch.py, runpy). ``show_command`` makes the process's command line the one the user typed,
``python [flags] train.py ARGS``; ``trim_tracebacks`` prints an uncaught exception from its first frame outside
gpuwatch and runpy, as a bare ``python train.py`` would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import TracebackType

from gpuwatch.train.argv import BOOTSTRAP

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gpuwatch
LAUNCH_MODULES = ("gpuwatch.launch", "gpuwatch.train.launch")


def user_command(orig_argv: Sequence[str], target: Sequence[str]) -> list[str] | None:
    """The command line the user typed: the interpreter and its flags as they were run (``sys.orig_argv`` up to the
    launcher: ``bootstrap.py`` or ``-m gpuwatch.launch``), then ``target`` (``[script, *args]`` or ``["-m", module,
    *args]``); None when the launcher is not in ``orig_argv`` (nothing to hide)."""
    for index, word in enumerate(orig_argv[1:], start=1):
        by_path = os.path.basename(word) == "bootstrap.py" and os.path.realpath(word) == os.path.realpath(BOOTSTRAP)
        by_module = word == "-m" and index + 1 < len(orig_argv) and orig_argv[index + 1] in LAUNCH_MODULES
        if by_path or by_module:
            return [*orig_argv[:index], *target]
    return None


def show_command(words: Sequence[str]) -> bool:
    """Make ``/proc/self/cmdline`` read ``words`` (what ps, htop, nvtop and gpuwatch's process table show); False
    when it could not (it is then left as it was).

    The kernel reads a process's command line from its own memory, ``arg_start`` to ``arg_end`` (proc(5),
    /proc/PID/stat fields 48-49; fs/proc/base.c, ``get_mm_cmdline``), where execve(2) put argv; CPython keeps its
    own copy of argv (``sys.orig_argv``), so the area is free to rewrite, as setproctitle(3) does. The new words
    are never longer than the launcher's command they replace (its options are left out), and the rest of the
    area is NULs: the last byte stays NUL, so the kernel reads the area as argv, not as a setproctitle title.
    Written only where the area holds exactly what ``/proc/self/cmdline`` says (a misread never writes).
    """
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()  # after comm, which may hold spaces and ")"
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49, counted from 1 with pid and comm
        with open("/proc/self/cmdline", "rb") as cmdline:
            current = cmdline.read()
    except (OSError, ValueError, IndexError):
        return False
    data = b"\0".join(os.fsencode(word) for word in words) + b"\0"
    size = end - start
    if start <= 0 or size != len(current) or len(data) > size:
        return False
    import ctypes  # only here: the training process pays for it once, and only where it rewrites

    if ctypes.string_at(start, size) != current:
        return False
    ctypes.memmove(start, data.ljust(size, b"\0"), size)
    return True


def _ours(filename: str) -> bool:
    """A frame of gpuwatch's launcher or of runpy (``<frozen runpy>`` since Python 3.11)."""
    return (filename.startswith(_PACKAGE_DIR + os.sep) or filename == "<frozen runpy>"
            or os.path.basename(filename) == "runpy.py")


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from its first frame outside gpuwatch and runpy; the whole one when every frame is theirs (an
    error of the launcher itself)."""
    first = tb
    while first is not None and _ours(first.tb_frame.f_code.co_filename):
        first = first.tb_next
    return first if first is not None else tb


def _print_user_traceback(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    # PyErr_Display prints the exception's own __traceback__ when it has one, not the argument: trim both.
    trimmed = user_frames(tb)
    sys.__excepthook__(kind, value.with_traceback(trimmed), trimmed)


def trim_tracebacks() -> None:
    """An uncaught exception of the script (a crash, Ctrl-C's KeyboardInterrupt) is printed from the script's own
    frames. A hook the script sets itself replaces this one, as it would replace Python's."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _print_user_traceback
