"""ROCm's per-process GPU view in sysfs, which DRM fdinfo lacks: KFD (``/dev/kfd``) work bypasses the
kernel's scheduler, so a PyTorch-on-ROCm trainer shows ~0 ``drm-engine-*`` time
(amdgpu_top issue 49 found the same).

amdkfd (kfd_process.c) creates, per process that opened /dev/kfd and per GPU it uses:
``class/kfd/kfd/proc/<pid>/vram_<gpu_id>`` (bytes) and ``stats_<gpu_id>/cu_occupancy`` (compute units
running its waves, where the ASIC supports it). ``gpu_id`` is KFD's own id: ``topology/nodes/<n>/gpu_id``
(0 for CPU nodes) maps it to a PCI slot through ``properties``' ``domain`` and ``location_id``
(``bus << 8 | devfn``, kfd_topology.c), and ``simd_count / simd_per_cu`` is the GPU's CU count.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.procs.fdinfo import u64
from gpuwatch.sysfs import Sysfs, SysfsError

BASE = "class/kfd/kfd"


@dataclass(frozen=True)
class KfdNode:
    gpu_id: str  # PCI slot
    compute_units: int | None


@dataclass(frozen=True)
class KfdUse:
    """One process's KFD use of one GPU."""

    gpu_id: str  # PCI slot
    vram_bytes: int | None
    cu_occupancy_ratio: float | None


def topology(sysfs: Sysfs) -> dict[str, KfdNode]:
    """KFD gpu_id (as its file name suffix) -> the GPU's slot and CU count; empty without amdkfd."""
    nodes: dict[str, KfdNode] = {}
    for node in sysfs.list(f"{BASE}/topology/nodes"):
        try:
            kfd_id = sysfs.read(f"{BASE}/topology/nodes/{node}/gpu_id")
            props = _properties(sysfs.read(f"{BASE}/topology/nodes/{node}/properties") or "")
        except SysfsError:
            continue
        if not kfd_id or kfd_id == "0" or "location_id" not in props:
            continue
        loc, domain = props["location_id"], props.get("domain", 0)
        slot = f"{domain:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1F:02x}.{loc & 7}"
        per_cu = props.get("simd_per_cu") or 0
        nodes[kfd_id] = KfdNode(gpu_id=slot, compute_units=props.get("simd_count", 0) // per_cu if per_cu else None)
    return nodes


def pids(sysfs: Sysfs) -> set[int]:
    """Every process with /dev/kfd open: one listdir, the cheap way to find ROCm processes at once."""
    try:
        return {pid for name in sysfs.list(f"{BASE}/proc") if (pid := u64(name)) is not None}
    except SysfsError:
        return set()


def usage(sysfs: Sysfs, pid: int, nodes: dict[str, KfdNode], skip: frozenset[str] = frozenset()) -> list[KfdUse]:
    """What ``pid`` holds through KFD, per GPU; GPUs in ``skip`` (in reset) are not read."""
    found = []
    for kfd_id, node in nodes.items():
        if node.gpu_id in skip:
            continue
        try:
            vram = sysfs.read(f"{BASE}/proc/{pid}/vram_{kfd_id}")
        except SysfsError:
            continue
        if vram is None:
            continue
        try:  # a bad occupancy costs the VRAM nothing
            cus = sysfs.read(f"{BASE}/proc/{pid}/stats_{kfd_id}/cu_occupancy")
        except SysfsError:
            cus = None
        occupancy = None
        busy_cus = None if cus is None else u64(cus)
        if busy_cus is not None and node.compute_units:
            occupancy = busy_cus / node.compute_units
        found.append(KfdUse(gpu_id=node.gpu_id, vram_bytes=u64(vram), cu_occupancy_ratio=occupancy))
    return found


def _properties(text: str) -> dict[str, int]:
    """``key value`` lines (the topology's ``properties`` file)."""
    props = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        number = u64(value.strip())
        if number is not None:
            props[key] = number
    return props
