"""A real one-node Slurm for end-to-end tests: munged, slurmctld and slurmd (Debian's munge and slurm-wlm 22.05,
installed by scripts/install-system-deps.sh as root), each in the foreground under a ``Processes``.

Everything lives in one temporary directory: the munge key and socket, slurm.conf, the state and spool
directories, the logs; the ports are free ones on 127.0.0.1. Nothing of the machine's own /etc/slurm or
/etc/munge is used. Only root can run it (slurmd runs jobs as their users and the health check as root);
``missing()`` says why not, for the skip.

Process tracking is ``proctrack/linuxproc`` and ``task/none``: the cgroup plugins need a writable,
delegated cgroup tree (cgroup v2 with the cpu, memory and pids controllers, or v1 hierarchies slurmd may
create below), which a test container usually does not give; the job-to-GPU mapping is then the
prolog's file (procs/jobs.py reads both), as on clusters that run without cgroups.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import Processes, free_port
from tests.support.waiting import wait_for

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sbatch", "srun")


def missing() -> str:
    """Why the real Slurm cannot run here ('' when it can)."""
    if os.geteuid() != 0:
        return "a real slurmd runs only as root (make test as root installs and runs it)"
    gone = [name for name in BINARIES if shutil.which(name) is None]
    if gone:
        return (f"{', '.join(gone)} missing: apt-get install slurm-wlm munge "
                "(scripts/install-system-deps.sh does it as root)")
    return ""


def node_name() -> str:
    """slurmd registers under the short host name; NodeName must be it."""
    return socket.gethostname().split(".")[0]


def python_command(*args: str, launcher: str = "") -> str:
    """A shell command line running this checkout's `gpuwatch ARGS` (slurmd's children get a bare environment);
    ``launcher`` goes before the interpreter (``srun``: a job step on every node of the job, PYTHONPATH with it)."""
    path = os.pathsep.join(p for p in sys.path if p)
    quoted = " ".join(f"'{a}'" for a in args)
    return (f"PYTHONPATH='{path}' {launcher} '{sys.executable}' -c 'import sys; from gpuwatch.cli import main; "
            f"sys.exit(main())' {quoted}")


@dataclass
class Slurm:
    root: Path
    conf: Path
    node: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60, env=self.env)
        assert done.returncode == 0, f"scontrol {' '.join(args)}: {done.stderr}"
        return done.stdout

    def show_node(self) -> str:
        return self.scontrol("show", "node", self.node)

    def sbatch(self, *args: str) -> str:
        done = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=60,
                              env=self.env, cwd=self.root)
        assert done.returncode == 0, f"sbatch: {done.stderr}"
        return done.stdout.strip().split(";")[0]


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def start_slurm(processes: Processes, root: Path, health_check: str | None = None, interval_s: int = 2,
                prolog: str | None = None, epilog: str | None = None) -> Slurm:
    """munged, slurmctld and slurmd in ``root``; ``health_check``, ``prolog``, ``epilog``: shell command lines."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # munged refuses a socket directory others may write to
    for sub in ("ctld", "spool"):
        (root / sub).mkdir(exist_ok=True)
    key = root / "munge.key"
    subprocess.run(["mungekey", "-c", "-k", str(key), "-b", "1024"], check=True, capture_output=True, timeout=60)
    key.chmod(0o400)
    sock = root / "munge.sock"
    munge = processes.start("munged", ["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                                       f"--pid-file={root / 'munge.pid'}", f"--log-file={root / 'munge.log'}",
                                       f"--seed-file={root / 'munge.seed'}"])
    wait_for(sock.exists, "munged's socket", 60, detail=munge.tail)
    node = node_name()
    conf = root / "slurm.conf"
    here = f"export SLURM_CONF={conf}\n"  # slurmd runs them with a bare environment: scontrol must find this cluster
    lines = [
        "ClusterName=gpuwatchtest", f"SlurmctldHost={node}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}", "AuthType=auth/munge",
        f"AuthInfo=socket={sock}", "CredType=cred/munge", f"StateSaveLocation={root / 'ctld'}",
        f"SlurmdSpoolDir={root / 'spool'}", f"SlurmctldPidFile={root / 'ctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}", f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin", "SelectType=select/linear", "MpiDefault=none", "ReturnToService=2",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    if health_check is not None:
        lines += [f"HealthCheckProgram={script(root / 'healthcheck.sh', here + health_check)}",
                  f"HealthCheckInterval={interval_s}", "HealthCheckNodeState=ANY"]
    if prolog is not None:
        lines.append(f"Prolog={script(root / 'prolog.sh', here + prolog)}")
    if epilog is not None:
        lines.append(f"Epilog={script(root / 'epilog.sh', here + epilog)}")
    conf.write_text("\n".join(lines) + "\n")
    slurm = Slurm(root, conf, node)
    ctld = processes.start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
    wait_for(lambda: subprocess.run(["scontrol", "ping"], capture_output=True, env=slurm.env, timeout=30)
             .returncode == 0, "slurmctld to answer", 90, detail=ctld.tail)
    slurmd = processes.start("slurmd", ["slurmd", "-D", "-f", str(conf)])
    wait_for(lambda: "State=IDLE" in slurm.show_node() or "DRAIN" in slurm.show_node(), "the node to register",
             120, detail=slurmd.tail)
    return slurm
