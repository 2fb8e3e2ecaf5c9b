"""`make install` and `make uninstall` as run in an image build or a plain container: the Debian root with
systemd installed but not running (nspawn's stub init is PID 1), the defaults, pip offline from the
wheelhouse. Both exit 0 with one note for each skipped systemctl step; `gpuwatch` is on a fresh user's
login PATH after the install (and the README's completion lines work in that user's fresh home) and gone
after the uninstall, with nothing the install made left behind."""

from __future__ import annotations

import shutil

import pytest

from tests.support.debian_root import cached_root, find_mirror
from tests.support.nspawn import Container, why_not_here
from tests.support.paths import REPO
from tests.support.unit_rig import CONTAINER_MARKS, stage

pytestmark = CONTAINER_MARKS

MAKE = shutil.which("make")
# Each step prints a marker line with its exit status; the container's one program runs them in order.
SCRIPT = r"""
cd /usr/src/gpuwatch
step() {
  name=$1; shift; "$@" >"/tmp/$name.out" 2>"/tmp/$name.err"
  echo "== $name rc=$?"; sed 's/^/out: /' "/tmp/$name.out"; sed 's/^/err: /' "/tmp/$name.err"
}
useradd -m -s /bin/bash alice
listing() { find /usr/share/bash-completion /usr/share/zsh /usr/share/fish /usr/local /opt 2>&1 | sort; }
step before listing
step install make install
step path su -l alice -c 'command -v gpuwatch && gpuwatch sensors --help >/dev/null && echo runs'
grep '^mkdir -p ~/' README.md > /tmp/readme-completion.sh
step readme su -l alice -c 'bash -e /tmp/readme-completion.sh && cd && find .local .config -type f | sort'
step uninstall make uninstall
step after su -l alice -c 'command -v gpuwatch || echo "no gpuwatch"'
step left listing
"""


def steps(stdout: str) -> dict[str, tuple[int, list[str], list[str]]]:
    """``== name rc=N`` blocks -> (rc, stdout lines, stderr lines)."""
    found: dict[str, tuple[int, list[str], list[str]]] = {}
    name = ""
    for line in stdout.splitlines():
        if line.startswith("== "):
            name, _, rc = line[3:].partition(" rc=")
            found[name] = (int(rc), [], [])
        elif name and line.startswith("out: "):
            found[name][1].append(line[5:])
        elif name and line.startswith("err: "):
            found[name][2].append(line[5:])
    return found


@pytest.mark.skipif(MAKE is None, reason="make missing")
def test_install_and_uninstall_exit_0_without_systemd_and_gpuwatch_is_on_path() -> None:
    reason = why_not_here()
    mirror = find_mirror() if reason is None else None
    if reason is not None or mirror is None:
        pytest.skip(f"container: {reason or 'no apt source for this release to build the root from'}")
    report: list[str] = []
    box = Container(cached_root(*mirror, report))
    try:
        stage(box, REPO, report)
        (box.upper / "usr/bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(str(MAKE), box.upper / "usr/bin/make")  # minbase has no make; the host's is the same release's
        done = box.run("bash", "-c", SCRIPT, timeout=400,
                       env=["PIP_INSTALL_ARGS=--no-index --find-links /root/wheels", "PIP_DISABLE_PIP_VERSION_CHECK=1"])
    finally:
        problems = box.close()
    assert not problems, problems
    seen = steps(done.stdout)
    assert set(seen) == {"before", "install", "path", "readme", "uninstall", "after", "left"}, done.stdout + done.stderr

    rc, out, err = seen["install"]
    assert rc == 0, "\n".join(out + err)
    assert "command: /usr/local/bin/gpuwatch -> /opt/gpuwatch/bin/gpuwatch" in out
    assert err == ["note: systemd is not running here (no /run/systemd/system): skipped `systemctl daemon-reload`"]

    rc, out, err = seen["path"]
    assert (rc, out) == (0, ["/usr/local/bin/gpuwatch", "runs"]), "\n".join(out + err)

    # README's completion lines for one's own account, on a fresh one (issue 50 item 14: the folders made first).
    rc, out, err = seen["readme"]
    assert (rc, out) == (0, [".config/fish/completions/gpuwatch.fish",
                             ".local/share/bash-completion/completions/gpuwatch"]), "\n".join(out + err)

    rc, out, err = seen["uninstall"]
    assert rc == 0, "\n".join(out + err)
    assert err == [f"note: systemd is not running here (no /run/systemd/system): skipped `systemctl {what}`"
                   for what in ("disable --now gpuwatch.service", "daemon-reload")]
    assert out[-1] == "gpuwatch uninstalled"

    assert seen["after"][1] == ["no gpuwatch"]
    # Nothing the install made stays: not the link, the venv, nor the completion folders it created.
    assert seen["left"] == seen["before"]

