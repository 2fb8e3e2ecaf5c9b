"""Pure parsers of the /proc text a process table needs: DRM fdinfo, ``stat``, ``status`` and ``cmdline``.

DRM fdinfo (kernel Documentation/gpu/drm-usage-stats.rst; drm_file.c, amdgpu_fdinfo.c):
* one ``key: value`` per line, split at the *first* colon, whitespace around both halves ignored
  (amdgpu prints ``drm-memory-gtt: \\t...``, a space before the tab);
* a client is an fd whose ``drm-driver`` line exists; only ``amdgpu`` clients count (i915, xe and the
  ``amdxdna`` NPU use the same keys). No ``drm-driver`` at all: the pre-5.19 format, or a device whose
  driver was unbound (6.15+ prints only the generic lines): not a client;
* the *first* occurrence of a key wins: 6.5 and 6.6 print ``drm-driver``, ``drm-pdev`` and
  ``drm-client-id`` twice with two different ids (fixed in 6.7); the core's comes first;
* ``drm-engine-<ip>: <ns> ns`` is cumulative busy time, printed only when nonzero; the same name can
  come from two IP indexes (``dec``, ``enc``), so engine lines are summed; ``drm-engine-capacity-*``
  is not time;
* memory: ``drm-resident-<region>`` (6.13+) else ``drm-memory-<region>`` (its deprecated alias, KiB);
  a size is bytes, ``KiB`` or ``MiB`` (the 6.8+ printer picks the largest exact unit; ``0`` has none),
  ``kB`` in the pre-5.19 format;
* every number is a kernel ``u64`` printed with ``%llu``: ASCII digits, at most 2**64 - 1 (``u64``).
  Anything else is no value: ``str.isdigit`` takes ``²`` and ``٣``, ``int`` a sign, ``_`` and blanks,
  and a 400-digit value once overflowed ``float()`` further on (issue 31: the process scan raised, and
  /metrics answered 500).
"""

from __future__ import annotations

from dataclasses import dataclass

U64_MAX = (1 << 64) - 1
_U64_DIGITS = len(str(U64_MAX))
_UNITS = {"": 1, "B": 1, "kB": 1024, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_ENGINE = "drm-engine-"
_CAPACITY = "drm-engine-capacity-"
_KEYS = frozenset({"drm-driver", "drm-pdev", "drm-client-id", "drm-resident-vram", "drm-resident-gtt",
                   "drm-memory-vram", "drm-memory-gtt"})  # the others (per-region total, shared...) are skipped


@dataclass(frozen=True)
class DrmClient:
    """One open DRM file (``struct drm_file``) as its fdinfo describes it."""

    driver: str
    pdev: str | None  # PCI slot, lowercase: the gpu_id of the GPU it uses
    client_id: int | None
    vram_bytes: int | None
    gtt_bytes: int | None
    engine_ns: int  # all drm-engine-* summed; 0 when none is printed (idle, or KFD-only work)

    @property
    def key(self) -> tuple[str | None, int | None]:
        """Unique per open file; a dup'd or inherited fd shows the same key in several fds and pids."""
        return (self.pdev, self.client_id)


def parse_fdinfo(text: str) -> DrmClient | None:
    """The DRM client an fdinfo file describes, or None when it is not one."""
    fields: dict[str, str] = {}
    engine_ns = 0
    for line in text.splitlines():
        if not line.startswith("drm-"):  # the generic lines, pasid, amd-*: nothing read here
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.rstrip()
        if key.startswith(_ENGINE):
            if not key.startswith(_CAPACITY):
                engine_ns += _engine_ns(value.strip())
        elif key in _KEYS and key not in fields:
            fields[key] = value.strip()
    driver = fields.get("drm-driver")
    if not driver:
        return None
    return DrmClient(
        driver=driver,
        pdev=(fields.get("drm-pdev") or "").lower() or None,
        client_id=_int(fields.get("drm-client-id")),
        vram_bytes=_memory(fields, "vram"),
        gtt_bytes=_memory(fields, "gtt"),
        engine_ns=engine_ns,
    )


def u64(text: str) -> int | None:
    """A kernel ``u64`` printed in decimal; None for anything else (see the module's docstring)."""
    if not (0 < len(text) <= _U64_DIGITS and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= U64_MAX else None


def parse_size(value: str) -> int | None:
    """``"44564 KiB"`` -> bytes; ``"0"`` -> 0; None for anything else (a size past a u64 of bytes too)."""
    number, _, unit = value.partition(" ")
    scale = _UNITS.get(unit.strip())
    count = u64(number)
    if scale is None or count is None or count * scale > U64_MAX:
        return None
    return count * scale


def _memory(fields: dict[str, str], region: str) -> int | None:
    for key in (f"drm-resident-{region}", f"drm-memory-{region}"):
        if key in fields:
            return parse_size(fields[key])
    return None


def _engine_ns(value: str) -> int:
    return u64(value.removesuffix("ns").strip()) or 0


def _int(value: str | None) -> int | None:
    return None if value is None else u64(value)


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the process table uses (proc_pid_stat(5))."""

    pid: int
    comm: str
    state: str  # R S D Z T t X I ...
    ppid: int
    start_ticks: int  # clock ticks since boot: (pid, start_ticks) tells a reused pid apart


def parse_stat(line: str) -> ProcStat | None:
    """Field 2 is ``(comm)`` and may hold spaces and ``)``: split at the *last* ``)``."""
    head, sep, tail = line.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    rest = tail.split()
    # After comm: state(3) ppid(4) ... starttime(22), i.e. rest[0], rest[1] and rest[19].
    if not sep or len(rest) < 20:
        return None
    pid, ppid, start_ticks = u64(pid_text.strip()), u64(rest[1]), u64(rest[19])
    if pid is None or ppid is None or start_ticks is None:
        return None
    return ProcStat(pid=pid, comm=comm, state=rest[0], ppid=ppid, start_ticks=start_ticks)


def parse_uid(status: str) -> int | None:
    """The real uid from ``Uid:\\t<real>\\t<effective>\\t<saved>\\t<fs>`` (a fake tree cannot chown)."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            return u64(parts[1]) if len(parts) > 1 else None
    return None


def command_line(cmdline: str | None, comm: str | None, limit: int = 200) -> str:
    """NUL-separated argv joined by spaces; ``[comm]`` for kernel threads and zombies (empty cmdline), as ps does."""
    text = " ".join(part for part in (cmdline or "").split("\0") if part)
    if not text:
        return f"[{comm}]" if comm else "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."
