"""Builds fake /proc trees with the kernel's layout: for tests, the benchmark and the simulator.

``<root>/<pid>/`` holds ``stat`` (52 fields, proc_pid_stat(5)), ``status`` (``Name``, ``State``, ``PPid``,
``Uid``, ``Threads``), ``cmdline`` (NUL-separated), ``fd/<n>`` symlinks to their target (a DRM render
node, ``/dev/kfd``, ``pipe:[...]``...; dangling, as they would be outside /dev), ``fdinfo/<n>`` (the
generic ``pos/flags/mnt_id/ino`` lines, then the driver's), and ``task/<tid>/stat`` per thread.
``amdgpu_fdinfo`` writes the 6.13+ amdgpu layout; tests keep other kernels' layouts as fixtures.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

RENDER_NODE = "/dev/dri/renderD128"
KFD_NODE = "/dev/kfd"
_STATE_NAMES = {"R": "running", "S": "sleeping", "D": "disk sleep", "T": "stopped", "Z": "zombie", "I": "idle"}


def generic_fdinfo(ino: int = 614, flags: str = "02100002") -> str:
    """The lines every fdinfo starts with (proc(5)): the driver's keys follow."""
    return f"pos:\t0\nflags:\t{flags}\nmnt_id:\t24\nino:\t{ino}\n"


def _size(value: int) -> str:
    """The 6.8+ unit printer: the largest unit that divides exactly; 0 has none."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value and value % scale == 0:
            return f"{value // scale} {unit}"
    return str(value)


def amdgpu_fdinfo(client_id: int, pdev: str, vram_bytes: int = 0, gtt_bytes: int = 0,
                  engines_ns: Mapping[str, int] | None = None, pasid: int = 32770) -> str:
    """An amdgpu client's fdinfo as 6.13+ kernels print it (core header, per-region stats, legacy keys)."""
    lines = ["drm-driver:\tamdgpu", f"drm-client-id:\t{client_id}", f"drm-pdev:\t{pdev}", f"pasid:\t{pasid}"]
    for region, used in (("cpu", 0), ("gtt", gtt_bytes), ("vram", vram_bytes)):
        for stat, value in (("total", used), ("shared", 0), ("resident", used), ("purgeable", 0)):
            lines.append(f"drm-{stat}-{region}:\t{_size(value)}")
    for region in ("gds", "gws", "oa", "doorbell"):
        lines += [f"drm-{stat}-{region}:\t0" for stat in ("total", "shared", "resident", "purgeable")]
    # The legacy keys keep their KiB unit and amdgpu's odd spacing (a space before the tab).
    lines += [f"drm-memory-vram:\t{vram_bytes // 1024} KiB", f"drm-memory-gtt: \t{gtt_bytes // 1024} KiB",
              "drm-memory-cpu: \t0 KiB", "amd-evicted-vram:\t0 KiB", f"amd-requested-vram:\t{vram_bytes // 1024} KiB",
              f"amd-requested-gtt:\t{gtt_bytes // 1024} KiB"]
    lines += [f"drm-engine-{name}:\t{ns} ns" for name, ns in (engines_ns or {}).items() if ns]
    return generic_fdinfo() + "\n".join(lines) + "\n"


def stat_line(pid: int, comm: str, state: str, ppid: int, start_ticks: int, threads: int = 1) -> str:
    """A 52-field stat line; the fields gpuwatch does not read hold plausible constants."""
    fields = [state, ppid, pid, pid, 0, -1, 4194560, 1500, 0, 12, 0, 8800, 2200, 0, 0, 20, 0, threads, 0,
              start_ticks, 4_000_000_000, 250_000, 18446744073709551615, *([0] * 30)]
    return f"{pid} ({comm}) " + " ".join(str(f) for f in fields[:50]) + "\n"


class FakeProcTree:
    """A writable fake ``/proc`` below ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def add_process(self, pid: int, comm: str = "python3", cmdline: Sequence[str] = ("python3", "train.py"),
                    ppid: int = 1, state: str = "S", uid: int = 1000, start_ticks: int = 100_000,
                    threads: Mapping[int, str] | None = None) -> Path:
        """A process (its main thread ``pid`` plus ``threads``: tid -> state); no fds yet."""
        base = self.root / str(pid)
        if base.exists():
            shutil.rmtree(base)
        for sub in ("fd", "fdinfo", "task"):
            (base / sub).mkdir(parents=True)
        all_threads = {pid: state, **(threads or {})}
        (base / "stat").write_text(stat_line(pid, comm, state, ppid, start_ticks, len(all_threads)))
        (base / "status").write_text(
            f"Name:\t{comm}\nUmask:\t0022\nState:\t{state} ({_STATE_NAMES.get(state, '?')})\nTgid:\t{pid}\n"
            f"Pid:\t{pid}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
            f"Threads:\t{len(all_threads)}\n")
        (base / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in cmdline))
        for tid, tstate in all_threads.items():
            (base / "task" / str(tid)).mkdir()
            (base / "task" / str(tid) / "stat").write_text(stat_line(tid, comm, tstate, ppid, start_ticks))
        return base

    def set_fd(self, pid: int, fd: int, target: str, fdinfo: str | None = None) -> None:
        """Open ``fd`` on ``target``; its fdinfo is ``fdinfo`` (default: the generic lines only)."""
        base = self.root / str(pid)
        link = base / "fd" / str(fd)
        if link.is_symlink():
            link.unlink()
        os.symlink(target, link)
        (base / "fdinfo" / str(fd)).write_text(fdinfo if fdinfo is not None else generic_fdinfo())

    def set_state(self, pid: int, state: str, tid: int | None = None) -> None:
        """Change the state of the process (its main thread) or of one of its threads."""
        base = self.root / str(pid)
        target = base / "task" / str(tid if tid is not None else pid) / "stat"
        target.write_text(_with_state(target.read_text(), state))
        if tid is None or tid == pid:
            (base / "stat").write_text(_with_state((base / "stat").read_text(), state))

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid), ignore_errors=True)

    def pids(self) -> list[int]:
        return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())


def _with_state(line: str, state: str) -> str:
    head, _, tail = line.rpartition(")")
    fields = tail.split()
    fields[0] = state
    return f"{head}) " + " ".join(fields) + "\n"
