"""Kernel uevents that say a GPU was wedged or reset, from a non-blocking netlink socket drained per tick.

``drm_dev_wedged_event()`` (6.15+; Documentation/gpu/drm-uapi.rst "Device wedging") sends a ``change``
event on the primary node ``.../<pci slot>/drm/cardN`` with ``WEDGED=<method>[,...]`` (amdgpu sends
``none`` after every successful ring or full reset) and, on newer kernels, the guilty ``PID=``/``TASK=``.
It is the one signal of a reset that makes no devcoredump (a second one within the dump's 5 minutes,
a ring reset). Kernel messages (group 1) are ``ACTION@DEVPATH\\0KEY=VALUE\\0...``; udev's re-broadcasts
(group 2, a binary ``libudev`` header) are not read. A process in another network namespace (a
container) receives none: the devcoredump scan still works there.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gpuwatch.resets")
NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 1

UeventFeed = Callable[[], list[bytes]]  # the datagrams that arrived since the last call


@dataclass(frozen=True)
class Wedged:
    gpu_id: str  # the PCI slot in DEVPATH, before /drm/cardN
    methods: str  # "none" (recovered by a reset), "rebind", "bus-reset", "unknown", ...
    pid: int | None = None
    task: str | None = None


def parse(datagram: bytes) -> tuple[str, str, dict[str, str]] | None:
    """``(action, devpath, environment)`` of a kernel uevent; None for udev's or garbage."""
    head, _, rest = datagram.partition(b"\0")
    action, at, devpath = head.decode("utf-8", "replace").partition("@")
    if not at or head.startswith(b"libudev"):
        return None
    env = {}
    for item in rest.split(b"\0"):
        key, eq, value = item.decode("utf-8", "replace").partition("=")
        if eq:
            env[key] = value
    return action, devpath, env


def wedged(datagram: bytes) -> Wedged | None:
    parsed = parse(datagram)
    if parsed is None:
        return None
    action, devpath, env = parsed
    if action != "change" or env.get("SUBSYSTEM") != "drm" or "WEDGED" not in env or "/drm/" not in devpath:
        return None
    slot = devpath.rsplit("/drm/", 1)[0].rsplit("/", 1)[-1].lower()
    pid = env.get("PID", "")
    # ASCII digits only (str.isdigit takes "²", which int() refuses), no longer than a pid_t prints.
    good_pid = pid.isascii() and pid.isdigit() and len(pid) <= 10
    return Wedged(gpu_id=slot, methods=env["WEDGED"], pid=int(pid) if good_pid else None, task=env.get("TASK"))


def card_changed(datagram: bytes) -> bool:
    """An ``add`` or ``remove`` of a DRM card node (``.../drm/cardN``, not its connectors ``cardN-DP-1``
    nor ``renderD*``): the driver probed a GPU, or let one go (a re-probe after a reset, a rebind,
    hotplug); the card may be back under another number."""
    parsed = parse(datagram)
    if parsed is None:
        return False
    action, devpath, env = parsed
    if action not in ("add", "remove") or env.get("SUBSYSTEM", "drm") != "drm" or "/drm/" not in devpath:
        return False
    node = devpath.rsplit("/", 1)[-1]
    return node.startswith("card") and node[4:].isascii() and node[4:].isdigit()


class UeventSocket:
    """The kernel's uevent multicast, non-blocking; ``drain()`` is a UeventFeed."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
        try:
            self.sock.bind((0, KERNEL_GROUP))
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise

    def drain(self) -> list[bytes]:
        got = []
        while True:
            try:
                got.append(self.sock.recv(65536))
            except BlockingIOError:
                return got
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # overrun: some events were lost; the dump scan still runs
                    log.warning("uevent socket overrun: some kernel events were lost")
                    continue
                raise

    def close(self) -> None:
        self.sock.close()


def open_uevents() -> UeventSocket | None:
    try:
        return UeventSocket()
    except OSError as exc:
        log.info("kernel uevents not available (%s): GPU resets are seen through devcoredump only", exc.strerror)
        return None
