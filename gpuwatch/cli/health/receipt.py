"""`gpuwatch receipt JOBID [--json]` (for a Slurm epilog): a job's thermal and energy receipt from the daemon.

The daemon keeps one receipt per job seen on a GPU (publish/receipts.py; the last ``[health] jobs_kept``) in
its published state, so an epilog that runs after the job's processes ended still finds it in the state file.
Rendering is pure (``render``); a job the daemon never saw is exit 1 with one line. With no daemon running, the
receipts a cleanly stopped daemon kept for the next one (state.last.json, publish/receipt_store.py) are read, and
that is said; with neither, exit 3, as when a daemon runs but its state file cannot be used (said, never "no
daemon"). A receipt is ``final`` once the daemon saw the job leave its GPUs, ``partial`` while it was still on one
at the last tick (an epilog that runs before the next tick): the text says which, ``--json`` adds ``receipt``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gpuwatch.cli.settings import load_cli_config
from gpuwatch.cli.text import safe, safe_strings
from gpuwatch.model import JobReceipt
from gpuwatch.publish.receipt_store import last_state_file
from gpuwatch.publish.state import read_state
from gpuwatch.publish.view import build

EXIT_NOT_FOUND = 1
EXIT_NO_DAEMON = 3


def cmd_receipt(args: argparse.Namespace) -> int:
    from gpuwatch.daemon.lock import holder

    config = load_cli_config(args, client=True, simulators=True)
    document, problem = read_state(config.state_file)
    if document is None:
        running = holder(config.resolved_runtime_dir)
        if running is not None:  # a daemon runs: its receipts are in its state, which cannot be read now
            why = problem or "it has no state file (a full or read-only runtime directory?)"
            print(f"gpuwatch receipt: the daemon (pid {running}) runs, but its state {config.state_file} cannot be "
                  f"used: {why}", file=sys.stderr)
            return EXIT_NO_DAEMON
        # Between a clean stop and the next start (a restart, an upgrade): what the last one kept.
        document, kept_problem = read_state(last_state_file(config.state_file))
        if document is None:
            why = "; ".join(p for p in (problem, kept_problem) if p)
            print(f"gpuwatch receipt: no daemon publishes in {config.resolved_runtime_dir}: no receipts"
                  + (f" ({why})" if why else ""), file=sys.stderr)
            return EXIT_NO_DAEMON
        stopped = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(document["taken_unix"]))
        print(f"gpuwatch receipt: no daemon runs; the receipts as the daemon that stopped at {stopped} kept them",
              file=sys.stderr)
    job = next((j for j in document.get("jobs", []) if j.get("job_id") == args.job_id), None)
    if job is None:
        known = safe(", ".join(str(j["job_id"]) for j in document.get("jobs", []))) or "none"
        print(f"gpuwatch receipt: job {safe(args.job_id)} was not seen on a GPU (receipts kept: {known})"
              + not_seen_why(document, args.job_id, bool(config.health.job_mapping_dirs)), file=sys.stderr)
        return EXIT_NOT_FOUND
    print(json.dumps({**job, "receipt": "partial" if job.get("active") else "final"}) if args.json else render(job),
          end="" if not args.json else "\n")
    return 0


def not_seen_why(document: Any, job_id: str, mapping: bool) -> str:
    """Why a job `status` shows on a run has no receipt: receipts count only processes the kernel (a Slurm job
    cgroup) or the prolog's mapping file place in the job; the run's job is its wrapper's SLURM_JOB_ID, which
    any user may set (docs/cluster.md, "Receipts"). Empty when no run names the job."""
    runs = [t for t in document.get("trainers", []) if t.get("job_id") == job_id]
    if not runs:
        return ""
    names = safe(", ".join(str(t.get("name")) for t in runs))
    where = ("nor a GPU's file in [health] job_mapping_dirs names it" if mapping
             else "and [health] job_mapping_dirs is not set for a prolog's mapping file")
    return (f".\n  `gpuwatch status` shows it on run {names} (its SLURM_JOB_ID), but a receipt counts only processes "
            f"that Slurm's job cgroup places in the job, {where}: with proctrack/cgroup, or a prolog writing the "
            "mapping (docs/cluster.md, \"Job attribution\"), the job gets one")


# Where the start of a job's first gap came from (publish/receipt_resume.unseen_before, procs/jobs.job_start).
_UNSEEN_FROM = {"scheduler": "when Slurm made its cgroup", "processes": "its processes' earliest start"}


def render(raw: Any) -> str:
    """The receipt as text: the job, then one block per GPU; the time no daemon ran, and its energy left out,
    said (an older daemon's receipt has neither field)."""
    job = build(JobReceipt, safe_strings(raw), "the job")  # its job id and user: strings a local user chose
    seconds = max(0.0, float(job.last_seen_unix) - float(job.first_seen_unix))
    total_j = sum(float(g.energy_j) for g in job.gpus)
    unseen = any(float(g.energy_unseen_s) for g in job.gpus)
    lines = [f"job {job.job_id}" + (f" ({job.user})" if job.user else "")
             + f": {seconds:.0f} s on {len(job.gpus)} GPU(s), {total_j / 1000:.1f} kJ"
             + (" + some not counted" if unseen else "")
             + (" (partial: running at the last tick)" if job.active else " (final)"),
             f"  paused {float(job.paused_s):.0f} s"]
    unobserved_s, gaps = float(job.unobserved_s), job.gaps
    if unobserved_s or gaps:
        lines += [f"  unobserved {unobserved_s:.0f} s: no daemon ran {len(gaps)} time(s) (a restart, a crash)",
                  "    its temperatures, throttling, caps and pauses then are not in this receipt"]
        if job.unseen_from in _UNSEEN_FROM:  # a job already running when a daemon first saw it
            lines.append(f"    the first from the job's start on this node: {_UNSEEN_FROM[job.unseen_from]}")
    for gpu in job.gpus:
        temps = ", ".join(f"{label} {temp:.0f}°C" for label, temp in sorted(gpu.max_temps_c)) or "n/a"
        throttled = ", ".join(f"{reason} {s:.0f} s" for reason, s in sorted(gpu.throttled_s) if s) or "none"
        lines += [f"  {gpu.gpu_id}: {float(gpu.energy_j) / 1000:.1f} kJ, max {temps}",
                  f"    governed {float(gpu.governed_s):.0f} s, throttled {throttled}, resets {gpu.resets}"]
        gap_j, unseen_s = float(gpu.gap_energy_j), float(gpu.energy_unseen_s)
        if gap_j:
            lines.append(f"    {gap_j / 1000:.1f} kJ of it while no daemon ran, from the GPU's energy counter")
        if unseen_s:
            lines.append(f"    not counted: the energy of {unseen_s:.0f} s with no daemon (its counter could not tell)")
    return "\n".join(lines) + "\n"
