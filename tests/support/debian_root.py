"""A minimal Debian root folder to boot systemd in (tests/e2e/systemd), cached outside the repository,
and a wheelhouse for installing gpuwatch inside it without network.

The root is built once by ``mmdebstrap --variant=minbase`` from this machine's own apt sources (no
host name is written anywhere) and reused while its key (recipe version, suite, architecture, package
list) stays the same. mmdebstrap rather than debootstrap: it downloads in parallel and lets dpkg skip
its fsyncs, which halves the cold build (50 s against 102 s, back to back on 2 busy cores). Where:
``$GPUWATCH_SYSTEMD_ROOT_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/gpuwatch-systemd-root``. A build
goes to ``<key>.tmp-<pid>`` and is renamed when complete, under a flock, so concurrent runs build it
once and a killed build never looks done.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

# Bump when the way the root is built changes (it is part of the cache key).
ROOT_RECIPE_VERSION = 2
# systemd as PID 1 (systemd-sysv: /sbin/init); python3 + python3-venv for scripts/install.sh's
# `python3 -m venv` (ensurepip). Deliberately not procps: minimal Debian has no /bin/kill, and the
# tests must show the unit does not need it. minbase brings bash, passwd (useradd), util-linux (setpriv).
# usr-is-merged: apt's solver would take the alternative usrmerge, which pulls in perl.
PACKAGES = ("systemd", "systemd-sysv", "python3", "python3-venv", "usr-is-merged")
VARIANT = "minbase"
MARKER = ".gpuwatch-root.json"


class RootError(Exception):
    """The root or the wheelhouse cannot be built; the message says why (with the log's tail)."""


def cache_base() -> Path:
    if os.environ.get("GPUWATCH_SYSTEMD_ROOT_CACHE"):
        return Path(os.environ["GPUWATCH_SYSTEMD_ROOT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuwatch-systemd-root"


def os_codename() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"') or None
    return None


def find_mirror() -> tuple[str, str] | None:
    """(mirror URI, suite) of this machine's apt sources for its own release, component main, or None.

    apt parses its sources itself (one-line and deb822 files, disabled entries): `apt-get indextargets`.
    """
    suite = os_codename()
    if suite is None or shutil.which("apt-get") is None:
        return None
    listing = subprocess.run(
        ["apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE) $(COMPONENT) $(TARGET_OF)",
         "Identifier: Packages"],
        capture_output=True, text=True, timeout=60,
    ).stdout
    for line in listing.splitlines():
        uri, release, component, kind = (line.split() + ["", "", "", ""])[:4]
        if kind == "deb" and release == suite and component == "main" and uri.startswith(("http://", "https://")):
            return uri.rstrip("/"), suite
    return None


def dpkg_arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def root_key(suite: str, arch: str) -> str:
    spec = json.dumps({"v": ROOT_RECIPE_VERSION, "suite": suite, "arch": arch, "variant": VARIANT,
                       "packages": sorted(PACKAGES)}, sort_keys=True)
    return f"{suite}-{arch}-" + hashlib.sha256(spec.encode()).hexdigest()[:16]


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_root(mirror: str, suite: str, log: list[str]) -> Path:
    """The root folder for PACKAGES (built now when the cache has none); ``log`` gets what happened."""
    arch = dpkg_arch()
    base = cache_base()
    root = base / root_key(suite, arch)
    with flocked(base / ".lock"):
        if (root / MARKER).exists():
            log.append(f"root: cached {root}")
            return root
        for stale in base.glob(f"{root.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = base / f"{root.name}.tmp-{os.getpid()}"
        # --mode=root: we are root (the tests need it anyway). force-unsafe-io: no fsync per file; a
        # build cut short is thrown away whole. mmdebstrap leaves no package cache or lists behind.
        cmd = ["mmdebstrap", "--mode=root", f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}",
               "--components=main", f"--architectures={arch}", "--dpkgopt=force-unsafe-io", suite, str(tmp), mirror]
        started = time.monotonic()
        logfile = base / f"{root.name}.build.log"
        with open(logfile, "w") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if rc != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RootError(f"{shlex.join(cmd)} failed ({rc}); {logfile}:\n{logfile.read_text()[-2000:]}")
        (tmp / "etc/dpkg/dpkg.cfg.d/99mmdebstrap").unlink(missing_ok=True)  # the unsafe-io option, kept there
        took_s = time.monotonic() - started
        (tmp / MARKER).write_text(json.dumps(
            {"packages": list(PACKAGES), "suite": suite, "arch": arch, "mirror": mirror,
             "recipe": ROOT_RECIPE_VERSION, "build_s": round(took_s, 1), "built": time.ctime()}, indent=1))
        os.rename(tmp, root)
        log.append(f"root: built {root} (mmdebstrap {took_s:.0f} s)")
        return root


def container_python(root: Path) -> str:
    """'3.11' from the root's /usr/bin/python3 link: the wheels must fit the container, not the host."""
    target = os.readlink(root / "usr/bin/python3")
    match = re.fullmatch(r"python(\d+\.\d+)", os.path.basename(target))
    if not match:
        raise RootError(f"cannot tell the container's python version from /usr/bin/python3 -> {target}")
    return match.group(1)


def glibc_minor(root: Path) -> int:
    """The highest GLIBC_2.N symbol version the root's libc defines (for manylinux_2_N tags)."""
    for lib in sorted(root.glob("usr/lib/*-linux-gnu/libc.so.6")):
        found = re.findall(rb"GLIBC_2\.(\d+)", lib.read_bytes())
        if found:
            return max(int(x) for x in found)
    raise RootError(f"no libc.so.6 under {root}/usr/lib")


def wheelhouse(repo: Path, root: Path, log: list[str]) -> Path:
    """Binary wheels of the project's dependencies and build requirements for the container's python
    and glibc, cached by that set. pip inside the container cannot reach an index (private network),
    and scripts/install.sh builds the project there (`pip install <source>`, build isolation), so the
    build requirements (setuptools) must be in it too."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())
    deps = list(project["project"].get("dependencies", []))
    build = list(project["build-system"]["requires"])
    pyver = container_python(root)
    glibc = glibc_minor(root)
    machine = os.uname().machine
    key = hashlib.sha256(json.dumps([deps, build, pyver, glibc, machine]).encode()).hexdigest()[:16]
    target = cache_base() / f"wheels-{key}"
    with flocked(cache_base() / ".lock"):
        if (target / ".complete").exists():
            log.append(f"wheels: cached {target}")
            return target
        shutil.rmtree(target, ignore_errors=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
               "--python-version", pyver, "--implementation", "cp", "-d", str(target)]
        for tag in [f"manylinux_2_{m}" for m in range(5, glibc + 1)] + ["manylinux2014", "manylinux2010", "manylinux1"]:
            cmd += ["--platform", f"{tag}_{machine}"]
        done = subprocess.run(cmd + deps + build, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RootError(f"pip download for the container failed ({done.returncode}):\n{done.stderr[-2000:]}")
        (target / ".complete").write_text("")
        log.append(f"wheels: downloaded {target}")
        return target
