"""The processes on the simulated cards, as the kernel would show them: a fake /proc and KFD's sysfs files.

Supervised trainers are real child processes; for each one running on a card the simulator mirrors its
pid into the fake /proc (command and uid from the real process) with an open render node whose fdinfo
says what a PyTorch-on-ROCm trainer's does: a little VRAM, no ``drm-engine-*`` time (KFD compute
bypasses the kernel scheduler), and its real VRAM and CU occupancy in
``class/kfd/kfd/proc/<pid>/vram_<gpu_id>`` and ``stats_<gpu_id>/cu_occupancy``. An optional desktop
client (a compositor: gfx engine time, some VRAM) and the D-state leftovers of a reset use pids above
the kernel's ``PID_MAX_LIMIT`` (4194304), which no real process can have.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpuwatch.sim.proctree import KFD_NODE, RENDER_NODE, FakeProcTree, amdgpu_fdinfo

FAKE_PID_BASE = 4194304
COMPUTE_UNITS = 36  # RX 5600 XT
MIB = 1024**2


@dataclass
class SimClient:
    pid: int
    card: int  # card index
    comm: str
    client_id: int
    kfd: bool
    fake: bool  # a pid of the fake /proc only (no real process behind it)
    load_ratio: float = 0.0
    gfx_busy_ratio: float = 0.0
    vram_bytes: int = 12 * MIB
    engine_ns: float = 0.0
    hung: bool = False
    hung_until_s: float | None = None  # a hung process that leaves D state at this simulated time
    until_s: float | None = None  # a leftover that goes away at this simulated time


class SimulatedClients:
    def __init__(self, proc_root: Path, sys_root: Path, slots: list[str], clock: Callable[[], float]) -> None:
        self.proc = FakeProcTree(proc_root)
        self.sys_root = sys_root
        self.slots = slots
        self.clock = clock
        self.clients: dict[int, SimClient] = {}
        self._next_id = 1
        self._last = clock()
        for index, slot in enumerate(slots):
            bus, dev = int(slot[5:7], 16), int(slot[8:10], 16)
            node = self.sys_root / "class/kfd/kfd/topology/nodes" / str(index + 1)
            node.mkdir(parents=True, exist_ok=True)
            (node / "gpu_id").write_text(f"{self.kfd_id(index)}\n")
            (node / "properties").write_text(f"simd_count {COMPUTE_UNITS * 2}\nsimd_per_cu 2\n"
                                             f"location_id {bus << 8 | dev << 3}\ndomain 0\n")

    @staticmethod
    def kfd_id(card: int) -> int:
        return 43000 + 17 * card

    def desktop(self, card: int = 0) -> None:
        """A compositor on ``card``: gfx work through the kernel scheduler, so engine time shows."""
        pid = FAKE_PID_BASE + 100
        self._add(SimClient(pid=pid, card=card, comm="gnome-shell", client_id=self._id(), kfd=False, fake=True,
                            gfx_busy_ratio=0.04, vram_bytes=180 * MIB), ["/usr/bin/gnome-shell"], os.getuid())

    def follow(self, running: Iterable[tuple[int, int, float]]) -> None:
        """``(pid, card, load)`` of every real trainer process on a card now; mirrors come and go with them."""
        wanted = {(pid, card): load for pid, card, load in running}
        for pid, client in list(self.clients.items()):
            if not client.fake and (pid, client.card) not in wanted:
                self._remove(pid)
        for (pid, card), load in wanted.items():
            if pid not in self.clients:
                self._mirror(pid, card)
            if pid in self.clients:
                self.clients[pid].load_ratio = load

    def advance(self, sim_now_s: float, answering: Callable[[int], bool]) -> None:
        """Engine time accrues in real seconds (the monitor divides by real time); files rewritten."""
        now = self.clock()
        elapsed_s, self._last = max(0.0, now - self._last), now
        for pid, client in list(self.clients.items()):
            if client.until_s is not None and sim_now_s >= client.until_s:
                self._remove(pid)
                continue
            if client.hung and client.hung_until_s is not None and sim_now_s >= client.hung_until_s:
                client.hung, client.hung_until_s = False, None
                self.proc.set_state(pid, "S")
            if not client.hung and answering(client.card):
                client.engine_ns += elapsed_s * client.gfx_busy_ratio * 1e9
            self._write(client)

    def hang(self, card: int, stuck_until_s: float | None, reset_done_s: float) -> list[int]:
        """A reset of ``card``: its processes hang (SIGSTOP; D in the fake /proc); a leftover stays in D until
        ``stuck_until_s``. Returns the real pids that were stopped.

        A fake client that is not a leftover (the desktop compositor) leaves D at ``reset_done_s``, when the
        reset is over: the driver signals the fences it was waiting on (with an error) and it goes on, as a
        compositor does after a reset (it sees its context lost and makes a new one). A process in D *forever*
        is only the leftover's case, and only for ``gpu_reset_stuck_s``."""
        stopped = []
        for client in [c for c in self.clients.values() if c.card == card]:
            client.hung = True
            self.proc.set_state(client.pid, "D")
            if client.fake:
                client.hung_until_s = reset_done_s if client.until_s is None else None
            else:
                try:
                    os.kill(client.pid, signal.SIGSTOP)
                    stopped.append(client.pid)
                except OSError:
                    pass
        if stuck_until_s is not None:
            client_id = self._id()
            pid = FAKE_PID_BASE + 1000 + client_id
            ghost = SimClient(pid=pid, card=card, comm="pt_data_worker", client_id=client_id, kfd=True, fake=True,
                              hung=True, until_s=stuck_until_s)
            self._add(ghost, ["python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"],
                      os.getuid())
            self.proc.set_state(pid, "D")
        return stopped

    def _mirror(self, pid: int, card: int) -> None:
        try:
            real = psutil.Process(pid)
            with real.oneshot():
                cmdline, uid, comm = real.cmdline(), real.uids().real, real.name()
        except psutil.Error:
            return
        self._add(SimClient(pid=pid, card=card, comm=comm[:15], client_id=self._id(), kfd=True, fake=False), cmdline,
                  uid)

    def guilty(self, card: int) -> tuple[int | None, str | None]:
        """The real process whose job a reset of ``card`` names in its dump."""
        for client in self.clients.values():
            if client.card == card and not client.fake:
                return client.pid, client.comm
        return None, None

    def _add(self, client: SimClient, cmdline: list[str], uid: int) -> None:
        self.clients[client.pid] = client
        self.proc.add_process(client.pid, comm=client.comm, cmdline=cmdline, uid=uid, start_ticks=client.client_id)
        self.proc.set_fd(client.pid, 0, "/dev/null")
        if client.kfd:
            self.proc.set_fd(client.pid, 5, KFD_NODE)
        self._write(client)

    def _write(self, client: SimClient) -> None:
        slot = self.slots[client.card]
        text = amdgpu_fdinfo(client.client_id, slot, vram_bytes=client.vram_bytes, gtt_bytes=20 * MIB,
                             engines_ns={"gfx": int(client.engine_ns)})
        self.proc.set_fd(client.pid, 7, RENDER_NODE, text)
        if client.kfd:
            base = self.sys_root / "class/kfd/kfd/proc" / str(client.pid)
            (base / f"stats_{self.kfd_id(client.card)}").mkdir(parents=True, exist_ok=True)
            (base / f"vram_{self.kfd_id(client.card)}").write_text(f"{int(client.load_ratio * 4 * 1024 * MIB)}\n")
            busy_cus = 0 if client.hung else round(client.load_ratio * COMPUTE_UNITS)
            (base / f"stats_{self.kfd_id(client.card)}" / "cu_occupancy").write_text(f"{busy_cus}\n")

    def _remove(self, pid: int) -> None:
        self.clients.pop(pid, None)
        self.proc.remove(pid)
        shutil.rmtree(self.sys_root / "class/kfd/kfd/proc" / str(pid), ignore_errors=True)

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id
