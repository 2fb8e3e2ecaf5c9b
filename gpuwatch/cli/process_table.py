"""`gpuwatch status --processes`: the table of who uses which GPU, one row per process and GPU (pure)."""

from __future__ import annotations

from gpuwatch.cli.text import NA, size
from gpuwatch.publish.light_view import light_view

TYPE_CHECKING = False  # publish/document.py imports the config's models (pydantic): annotations only (issue 52)
if TYPE_CHECKING:
    from gpuwatch.model import GpuProcess, StatusView
    from gpuwatch.publish.document import StatusDocument

HEADER = ("PID", "USER", "GPU", "VRAM", "GTT", "BUSY", "STATE", "TRAINER", "COMMAND")


def render_processes(doc: StatusDocument, width: int = 160) -> str:
    """One row per process and GPU, like nvidia-smi's table.

    VRAM is the larger of what a process's DRM clients hold and what KFD (ROCm) says it holds (the two may
    count the same buffers); ``-``: its client is one another process (its parent, usually) already counts.
    BUSY is its drm-engine-* time over wall time; ROCm compute goes through /dev/kfd and never shows there,
    so for a ROCm process whose engines read 0 it is the compute units its waves occupy (``cu``), where the
    kernel reports that.
    """
    return processes_text(light_view(doc), width)


def processes_text(view: StatusView, width: int = 160) -> str:
    """``render_processes`` of a view (cli/status.shown_view: `status --processes` builds one per reading)."""
    rows = sorted(view.processes, key=lambda r: (r.gpu_id, -_vram(r), r.pid))
    table: list[tuple[str, ...]] = [HEADER]
    table += [
        (str(r.pid), r.user or NA, r.gpu_id, _memory(_vram(r) if _held(r) else None),
         _memory(r.gtt_bytes), _busy(r), r.state or NA, r.trainer or "-", r.command or NA)
        for r in rows
    ]
    if any(r.job_id for r in rows):  # a scheduler's node (docs/cluster.md): the job beside the trainer
        jobs = ["JOB"] + [r.job_id or "-" for r in rows]
        table = [(*row[:-1], job, row[-1]) for row, job in zip(table, jobs, strict=True)]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    lines = []
    for row in table:
        line = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  "
        lines.append((line + fit_command(row[-1], width - len(line))).rstrip())
    if not rows:
        lines.append("no process has a GPU open (that gpuwatch may see)")
    unreadable = view.processes_unreadable
    if unreadable:
        lines.append(f"{unreadable} process(es) not readable (other users'): run as root to see them all")
    if any(r.kfd for r in rows):
        lines.append("ROCm (KFD) compute is not in the kernel's engine time: BUSY shows 'cu' occupancy for it")
    return "\n".join(lines) + "\n"


def fit_command(command: str, room: int) -> str:
    """The command in ``room`` columns, its script's name kept: too long, its paths are shown by their last part
    (``/home/alice/venv/bin/python /home/alice/exp/train.py`` -> ``python train.py``; the interpreter and the
    script come first), then it is cut with "…"."""
    if len(command) <= room:
        return command
    short = " ".join((word.rstrip("/").rsplit("/", 1)[-1] or word) if word.startswith("/") else word
                     for word in command.split(" "))
    return short if len(short) <= room else short[:max(room - 1, 0)] + "…"


def _held(row: GpuProcess) -> bool:
    return row.vram_bytes is not None or row.kfd_vram_bytes is not None


def _vram(row: GpuProcess) -> int:
    return max(row.vram_bytes or 0, row.kfd_vram_bytes or 0)


def _memory(value: int | None) -> str:
    return "-" if value is None else size(value)


def _busy(row: GpuProcess) -> str:
    engine, cu = row.engine_busy_ratio, row.kfd_cu_occupancy_ratio
    if row.kfd and cu is not None and not engine:
        return f"cu {cu * 100:.0f}%"
    return NA if engine is None else f"{engine * 100:.0f}%"
