"""A real systemd booted as PID 1 of a container (`systemd-nspawn -b`), driven from the host.

One run: ``<tmp>/gpuwatch-nspawn-<pid>-<rand>/`` holds an overlayfs upper/work dir over the cached root
(which is never written) and the mount point; the overlay is mounted only inside nspawn's private mount
namespace (``unshare -m``), so no mount can outlive the run. The run has its own cgroup in every
hierarchy nspawn uses (``--keep-unit`` builds the container's cgroups under its caller's: a shared
one would collide), and its helpers (nsenter) go into ``<id>/exec`` so a hung one dies with the run.
Teardown: SIGTERM to nspawn (a clean halt), then ``cgroup.kill``/SIGKILL of whatever is left, rmdir
of the cgroups, the run dir removed. A run whose owner died (kill -9) is removed by the next one
(``cleanup_stale``). docs/systemd.md ("The container tests") has what was learned about each step.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

PREFIX = "gpuwatch-nspawn-"
TOOLS = ("mmdebstrap", "systemd-nspawn", "nsenter", "unshare", "setpriv")
CGROUP = Path("/sys/fs/cgroup")
# Inside, with `env -i`: the host's environment (PIP_*, SSL_*, pyenv paths) must not leak in.
CONTAINER_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                 "HOME=/root", "TERM=dumb", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0")


class NspawnError(Exception):
    """The container cannot be booted or driven; the message says what was seen."""


def hierarchies() -> list[Path]:
    """The cgroup trees nspawn uses: the unified one (pure v2), or on a hybrid host the v2 ``unified``
    and the v1 ``name=systemd`` trees (the v1 controllers are left alone)."""
    if (CGROUP / "cgroup.controllers").exists():
        return [CGROUP]
    return [h for h in (CGROUP / "unified", CGROUP / "systemd") if (h / "cgroup.procs").exists()]


def why_not_here() -> str | None:
    """Why this machine cannot boot the container (for a skip), or None when it can."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, cgroups, mounts)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} missing: `make system-deps` installs mmdebstrap and systemd-container"
    found = hierarchies()
    if not found:
        return f"no cgroup v2 or v1 name=systemd hierarchy under {CGROUP}"
    probe = f"{PREFIX}probe-{os.getpid()}"
    for tree in found:
        try:
            (tree / probe).mkdir()
            (tree / probe).rmdir()
        except OSError as exc:
            return f"cgroup {tree} is not writable here ({exc.strerror})"
    return None


class Cgroups:
    """This run's own cgroup ``<name>`` (and ``<name>/exec``) in every hierarchy."""

    def __init__(self, name: str, dirs: Sequence[Path] = ()) -> None:
        self.name = name
        self.dirs = list(dirs)

    def create(self) -> None:
        for tree in hierarchies():
            (tree / self.name).mkdir()
            self.dirs.append(tree / self.name)
            (tree / self.name / "exec").mkdir()

    def enter(self, sub: str = "") -> None:
        """Move the calling process (a child between fork and exec) into ``<name>[/sub]`` everywhere."""
        for d in self.dirs:
            (d / sub / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    found |= {int(x) for x in procs.read_text().split()}
        return found

    def kill_all(self, timeout_s: float = 10.0) -> None:
        """``cgroup.kill`` (v2, Linux >= 5.14) on the subtree, and SIGKILL to every pid, until none is left."""
        deadline = time.monotonic() + timeout_s
        while pids := self.pids():
            for d in self.dirs:
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise NspawnError(f"processes survive SIGKILL in {self.name}: {sorted(pids)}")
            time.sleep(0.05)

    def remove(self) -> None:
        """rmdir every cgroup of the run, deepest first (EBUSY while the last tasks are reaped: retry)."""
        for d in self.dirs:
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [d]:
                for _ in range(100):
                    try:
                        sub.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.05)
                else:
                    raise NspawnError(f"cannot remove cgroup {sub}")


def cleanup_stale() -> list[str]:
    """Remove the runs whose owner process is dead (a harness killed with SIGKILL): processes, cgroups,
    run dirs. Runs of live owners are left alone. Returns the names removed."""
    tmp = Path(tempfile.gettempdir())
    names = {d.name for tree in hierarchies() for d in tree.glob(PREFIX + "*")}
    names |= {d.name for d in tmp.glob(PREFIX + "*") if d.is_dir()}
    removed = []
    for name in sorted(names):
        with contextlib.suppress(OSError, ValueError):
            if Path(f"/proc/{int((tmp / name / 'owner').read_text())}").exists():
                continue
        cgroups = Cgroups(name, [tree / name for tree in hierarchies() if (tree / name).exists()])
        cgroups.kill_all()
        cgroups.remove()
        with contextlib.suppress(OSError):
            Path("/run/systemd/nspawn/propagate", _machine(name)).rmdir()
        shutil.rmtree(tmp / name, ignore_errors=True)
        removed.append(name)
    return removed


def _machine(run_id: str) -> str:
    return "gw-" + run_id[-6:]


class Container:
    """One booted container; ``close()`` always runs (the fixture's finalizer) and leaves no process,
    mount, cgroup or folder. Stage files into ``upper`` before ``boot()``; after it, the container's
    files are ``path(...)`` (through PID 1's root) and commands run with ``sh(...)``."""

    def __init__(self, root: Path, boot_timeout_s: float = 60.0) -> None:
        self.root = root
        self.boot_timeout_s = boot_timeout_s
        self.id = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.machine = _machine(self.id)
        self.run_dir = Path(tempfile.gettempdir()) / self.id
        self.upper = self.run_dir / "upper"
        self.cgroups = Cgroups(self.id)
        self.nspawn: subprocess.Popen[bytes] | None = None
        self.pid1 = 0
        try:
            for sub in ("upper", "work", "merged"):
                (self.run_dir / sub).mkdir(parents=True)
            (self.run_dir / "owner").write_text(str(os.getpid()))  # cleanup_stale: is the owner alive?
            self.cgroups.create()
        except BaseException:
            self.close()
            raise

    def _overlay_script(self, nspawn_args: Sequence[str]) -> list[str]:
        """The command that mounts the overlay of the root in a private mount namespace and execs
        systemd-nspawn on it with ``nspawn_args`` (a copy where overlayfs cannot be mounted)."""
        merged = self.run_dir / "merged"
        opts = f"lowerdir={self.root},upperdir={self.upper},workdir={self.run_dir / 'work'}"
        mount = f"mount -t overlay overlay -o {shlex.quote(opts)} {shlex.quote(str(merged))}"
        # --register=no needs --keep-unit (else "Failed to open system bus"); the network stays inside.
        nspawn = ["systemd-nspawn", "--quiet", "-D", str(merged), "-M", self.machine, "--keep-unit",
                  "--register=no", "--private-network", "--link-journal=no", "--timezone=off",
                  "--resolv-conf=off", *nspawn_args]
        unshare = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c"]
        tried = subprocess.run([*unshare, f"{mount} && umount {shlex.quote(str(merged))}"], capture_output=True)
        if tried.returncode == 0:
            return [*unshare, f"{mount} && exec {shlex.join(nspawn)}"]
        # e.g. a cache that is itself on overlayfs: copy (reflink where the file system has it)
        subprocess.run(["cp", "-a", "--reflink=auto", f"{self.root}/.", str(merged)], check=True)
        subprocess.run(["cp", "-a", f"{self.upper}/.", str(merged)], check=True)
        return [*unshare, f"exec {shlex.join(nspawn)}"]

    def run(self, *argv: str, timeout: float = 300, env: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
        """``argv`` as the only program of the container, without booting it: nspawn's stub init is PID 1
        (``--as-pid2``), so systemd is installed but not running, as in an image build or a plain container."""
        args = ["--as-pid2", "--console=pipe", *(f"--setenv={e}" for e in (*CONTAINER_ENV, *env)), "--", *argv]
        return subprocess.run(self._overlay_script(args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, preexec_fn=self.cgroups.enter)

    def boot(self) -> str:
        """nspawn -b on an overlay of the root; returns ``systemctl is-system-running``'s answer once it is
        running or degraded."""
        with open(self.run_dir / "console.log", "wb") as console:
            self.nspawn = subprocess.Popen(self._overlay_script(["-b", "--console=pipe"]), stdin=subprocess.DEVNULL,
                                           stdout=console, stderr=subprocess.STDOUT, preexec_fn=self.cgroups.enter)
        deadline = time.monotonic() + self.boot_timeout_s
        state = ""
        while state not in ("running", "degraded"):
            self._check_alive()
            if time.monotonic() > deadline:
                raise NspawnError(f"not booted after {self.boot_timeout_s:g}s: pid1={self.pid1} state={state!r}")
            time.sleep(0.1)
            self.pid1 = self.pid1 or self._find_pid1()
            if self.pid1:  # not `is-system-running --wait`: that needs the bus
                state = self.sh("systemctl", "is-system-running", check=False, timeout=10).stdout.strip()
        return state

    def _check_alive(self) -> None:
        if self.nspawn is not None and self.nspawn.poll() is not None:
            tail = (self.run_dir / "console.log").read_text(errors="replace")[-3000:]
            raise NspawnError(f"systemd-nspawn exited with {self.nspawn.returncode}:\n{tail}")

    def _find_pid1(self) -> int:
        """The host pid of the container's PID 1: ``NSpid: <host pid> 1`` in its status."""
        for pid in self.cgroups.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("NSpid:") and line.split()[1:] == [str(pid), "1"]:
                        return pid
        return 0

    def close(self) -> list[str]:
        """Halt, kill what is left, remove cgroups and the run dir; returns what went wrong on the way."""
        problems = []
        try:
            # Helpers still running (an interrupted install) would hold the halt up for seconds.
            Cgroups("exec", [d / "exec" for d in self.cgroups.dirs if (d / "exec").exists()]).kill_all()
            if self.nspawn is not None and self.nspawn.poll() is None:
                self.nspawn.send_signal(signal.SIGTERM)  # nspawn halts the container (SIGRTMIN+3 to PID 1)
                try:
                    self.nspawn.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    problems.append("the container did not halt within 30 s: SIGKILL to its cgroup")
        finally:
            # A hung halt, an nsenter helper, a PID 1 orphaned by a killed nspawn: only the cgroup
            # catches them all. The overlay lived in nspawn's mount namespace and is gone with it.
            self.cgroups.kill_all()
            if self.nspawn is not None:
                self.nspawn.wait(timeout=10)
            self.cgroups.remove()
            with contextlib.suppress(OSError):  # left by nspawn where /run is not a tmpfs
                Path("/run/systemd/nspawn/propagate", self.machine).rmdir()
            if str(self.run_dir) in Path("/proc/self/mountinfo").read_text():
                problems.append(f"a mount under {self.run_dir} is still there: not removing it")
            else:
                shutil.rmtree(self.run_dir, ignore_errors=True)
        return problems

    def sh(self, *argv: str, user: str | None = None, check: bool = True, timeout: float = 120,
           env: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
        """``argv`` in all the container's namespaces with a clean environment, as ``user`` (setpriv,
        no PAM: uid, gid and its groups) when given."""
        cmd = ["nsenter", "-t", str(self.pid1), "-a", "env", "-i", *CONTAINER_ENV, *env]
        if user:
            cmd += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
        done = subprocess.run([*cmd, *argv], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=lambda: self.cgroups.enter("exec"))
        if check and done.returncode != 0:
            raise NspawnError(f"in the container: {shlex.join(argv)} -> {done.returncode}\n{done.stdout}{done.stderr}")
        return done

    def processes(self) -> dict[int, tuple[int, str]]:
        """Every process of the container but its PID 1: host pid -> (uid, command line)."""
        found = {}
        namespace = os.readlink(f"/proc/{self.pid1}/ns/pid")
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or entry.name == str(self.pid1):
                continue
            with contextlib.suppress(OSError):  # gone meanwhile
                if os.readlink(entry / "ns/pid") == namespace:
                    uid = next(int(line.split()[1]) for line in (entry / "status").read_text().splitlines()
                               if line.startswith("Uid:"))
                    found[int(entry.name)] = (uid, (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        return found

    def path(self, inside: str) -> Path:
        """A path of the container's file system, seen from the host."""
        return Path(f"/proc/{self.pid1}/root") / inside.lstrip("/")

    def write(self, inside: str, text: str, mode: int = 0o644) -> None:
        target = self.path(inside)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
