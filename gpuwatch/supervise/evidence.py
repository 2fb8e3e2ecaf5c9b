"""What the log gets before a hung trainer is stopped: its process tree (state, CPU time, command), the
GPUs it uses (busy is not progress) and what its processes hold on them, its Python stacks (py-spy,
optional, never required) and its last output lines."""

from __future__ import annotations

import shutil
import subprocess

from gpuwatch.model import Snapshot
from gpuwatch.supervise.process import TrainerProcess


def hang_evidence(name: str, reason: str, proc: TrainerProcess, snapshot: Snapshot | None,
                  gpus: tuple[str, ...]) -> str:
    lines = [f"trainer {name}: {reason}; evidence:"]
    for member in proc.tree():
        try:
            with member.oneshot():
                cpu = member.cpu_times()
                lines.append(f"  pid {member.pid} {member.status()} cpu {cpu.user + cpu.system:.1f}s "
                             f"{' '.join(member.cmdline())[:200]}")
        except Exception as exc:
            lines.append(f"  pid {member.pid}: {exc}")
    for gpu in snapshot.gpus if snapshot else ():
        if not gpus or gpu.gpu_id in gpus:
            busy = "N/A" if gpu.gpu_busy_ratio is None else f"{gpu.gpu_busy_ratio:.0%}"
            lines.append(f"  GPU {gpu.gpu_id} busy {busy} (busy is not progress)")
    for row in snapshot.processes if snapshot else ():
        if row.trainer == name:
            engine = "N/A" if row.engine_busy_ratio is None else f"{row.engine_busy_ratio:.0%}"
            lines.append(f"  pid {row.pid} on GPU {row.gpu_id}: state {row.state or '?'}, engine busy {engine}")
    lines.extend(py_spy(proc.pid))
    lines.append("  last output:")
    lines.extend(f"    {line}" for line in list(proc.tail)[-20:])
    return "\n".join(lines)


def py_spy(pid: int, timeout_s: float = 10.0) -> list[str]:
    """Python stacks of the hung trainer when py-spy is installed."""
    tool = shutil.which("py-spy")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"  py-spy failed: {exc}"]
    return ["  py-spy dump:"] + [f"    {line}" for line in (done.stdout or done.stderr).splitlines()[:200]]
