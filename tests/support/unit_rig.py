"""gpuwatch's unit inside the booted container (tests/support/nspawn.py): installed by the repository's
own scripts/install.sh, driven with systemctl, observed through the fake sysfs tree, `systemctl show`
and the journal. The cases are in tests/e2e/systemd; docs/systemd.md lists them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.debian_root import wheelhouse
from tests.support.nspawn import Container
from tests.support.paths import copy_source
from tests.support.trees import capture
from tests.support.waiting import wait_for

# The first test's setup includes the session's cold root build (mmdebstrap: 50 s, up to minutes on 2
# busy cores) and the install; every wait below is bounded on its own, well within this.
# One worker runs every container case (`--dist loadgroup`): they share one booted systemd per session.
CONTAINER_MARKS = [pytest.mark.systemd_container, pytest.mark.timeout(600), pytest.mark.xdist_group("systemd")]

PREFIX = "/opt/gpuwatch"
GPUWATCH = f"{PREFIX}/bin/gpuwatch"
CONFIG = "/etc/gpuwatch/gpuwatch.toml"
DROPIN_DIR = "/etc/systemd/system/gpuwatch.service.d"
FAKE_SYSFS = "/srv/fake-sysfs"
# Two GPUs, so "every fan" means more than one: a pwm1 fan each (RX 5700 XT, RX 6900 XT).
CARDS = ("navi10-rx5700xt-sapphire", "navi21-rx6900xt-sapphire-nitro")
HANDED_BACK_LOG = "/srv/stoppost.log"
CAPS_LOG = "/srv/stoppost-caps.log"
# Test-only settings, always present:
# - the fake tree stands in for /sys (ProtectSystem=strict leaves only the real /sys writable), and
#   /srv/ckpt is the documented "trainers write elsewhere" drop-in;
# - probes after the unit's own ExecStopPost record every fan's mode ("2 2") and every power cap once
#   `gpuwatch restore` has run and before any restart (ExecStopPost= lines run in order, and the next
#   only when one succeeded; "$$" is systemd's literal "$"; grep, not cat: what gpuwatch writes has no
#   newline).
TEST_DROPIN = f"""[Service]
ReadWritePaths=-{FAKE_SYSFS} -/srv/ckpt
ExecStopPost=+/bin/sh -c 'echo $$(grep -h . {FAKE_SYSFS}/class/hwmon/*/pwm1_enable) >> {HANDED_BACK_LOG}'
ExecStopPost=+/bin/sh -c 'echo $$(grep -h . {FAKE_SYSFS}/class/hwmon/*/power1_cap) >> {CAPS_LOG}'
"""

BASE_CONFIG = f"""\
sysfs_root = "{FAKE_SYSFS}"
backend = "amdgpu"
interval_s = 1.0
log_level = "info"

[fan]
# the fake tree's temperatures never change: the frozen-sensor failsafe would trip after 300 ticks
frozen_after_ticks = 0

[http]
listen = "127.0.0.1"
port = 9840
"""

TRAINER_CONFIG = """
[[trainer]]
name = "t1"
command = ["/usr/bin/python3", "/srv/trainer.py"]
cwd = "/var/lib/gpuwatch/t1"
user = "trainer"
grace_s = 30.0  # the checkpoint takes 2 s; room for a busy machine
hang_timeout_s = 600.0
"""

# The trainer: probes its sandbox once, leaves a grandchild that ignores SIGTERM in its own session
# (KillMode=mixed must SIGKILL it), then "trains". On SIGTERM it takes 2 s to "checkpoint" and records
# the fans' modes when done: still 1 (gpuwatch in control) if the fans go back only after it.
TRAINER = r'''
import errno, glob, json, os, signal, subprocess, sys, time
out = "/var/lib/gpuwatch/t1"
def probe(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def fans():
    return " ".join(open(p).read().strip() for p in sorted(glob.glob("/srv/fake-sysfs/class/hwmon/*/pwm1_enable")))
def event(text):
    with open(out + "/events", "a") as f:
        f.write(text + "\n")
json.dump({
    "uid": os.getuid(),
    "state_dir": probe(out + "/output.txt"),
    "rw_path": probe("/srv/ckpt/ckpt.txt"),
    "outside_rw_paths": probe("/srv/outside/x.txt"),
    "home": probe("/home/trainer/x.txt"),
    "tmp": probe("/tmp/trainer-private"),
    "tmp_sees_container_marker": os.path.exists("/tmp/container-marker"),
}, open(out + "/probe.json", "w"))
subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"],
    start_new_session=True)
def on_term(signum, frame):
    event("term")
    time.sleep(2.0)
    event("checkpoint_done fans=" + fans())
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
event("started")
while True:
    time.sleep(0.5)
'''


def stage(box: Container, repo: Path, log: list[str]) -> None:
    """Before boot: the source and the wheelhouse go into the overlay's upper dir."""
    copy_source(repo, box.upper / "usr/src/gpuwatch")
    shutil.copytree(wheelhouse(repo, box.root, log), box.upper / "root/wheels",
                    ignore=shutil.ignore_patterns(".complete"))


def install(box: Container) -> None:
    """scripts/install.sh inside the booted container, as an admin runs it: root, the defaults
    (PREFIX=/opt/gpuwatch, the real `systemctl daemon-reload`), pip offline from the wheelhouse."""
    box.sh("bash", "/usr/src/gpuwatch/scripts/install.sh", timeout=300,
           env=["PIP_INSTALL_ARGS=--no-index --find-links /root/wheels", "PIP_DISABLE_PIP_VERSION_CHECK=1"])


def prepare(box: Container) -> None:
    """Once per container: users, directories, the trainer, the test drop-in."""
    box.sh("useradd", "-m", "-s", "/bin/sh", "trainer")
    box.sh("useradd", "-m", "-s", "/bin/sh", "alice")  # only in her own group
    box.sh("useradd", "-m", "-s", "/bin/sh", "-G", "root", "bob")  # in group root (test_users: the admin group)
    for d in ("/srv/ckpt", "/srv/outside", "/var/lib/gpuwatch/t1"):
        box.sh("install", "-d", "-o", "trainer", "-g", "trainer", d)
    box.write("/srv/trainer.py", TRAINER)
    box.write(f"{DROPIN_DIR}/10-test.conf", TEST_DROPIN)


class Unit:
    """gpuwatch.service in the container, reset to a known state by ``reset``."""

    def __init__(self, box: Container) -> None:
        self.box = box
        self.hwmon: list[str] = []

    def reset(self, config: str = BASE_CONFIG, dropins: dict[str, str] | None = None) -> None:
        """Stopped and forgotten (reset-failed); this config; the test drop-in plus ``dropins``; a fresh
        fake tree with both fans in firmware mode; no probe or trainer records."""
        box = self.box
        box.sh("systemctl", "stop", "gpuwatch", check=False, timeout=240)
        box.sh("systemctl", "reset-failed", "gpuwatch", check=False)
        for dropin in box.path(DROPIN_DIR).glob("*.conf"):
            if dropin.name != "10-test.conf":
                dropin.unlink()
        for name, text in (dropins or {}).items():
            box.write(f"{DROPIN_DIR}/{name}", text)
        box.write(CONFIG, config)
        box.sh("systemctl", "daemon-reload")
        shutil.rmtree(box.path(FAKE_SYSFS), ignore_errors=True)
        tree = FakeSysfsTree(box.path(FAKE_SYSFS))  # relative links: built from the host as is
        self.hwmon = [str(tree.add_capture(capture(name)).hwmon_dir) for name in CARDS]
        for leftover in (HANDED_BACK_LOG, CAPS_LOG, "/var/lib/gpuwatch/t1/events", "/var/lib/gpuwatch/t1/probe.json"):
            box.path(leftover).unlink(missing_ok=True)

    # -- systemd ---------------------------------------------------------------------------------
    def systemctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.box.sh("systemctl", *args, check=False, timeout=timeout)

    def start(self) -> None:
        """`systemctl start`: Type=notify, so it returns once READY=1 came (or the start failed)."""
        done = self.systemctl("start", "gpuwatch", timeout=90)
        assert done.returncode == 0, f"start failed: {done.stderr}\n{self.journal()}"

    def prop(self, name: str) -> str:
        """One property as systemd holds it (`show -P`: the configured value, e.g. LimitNOFILE)."""
        return self.box.sh("systemctl", "show", "-P", name, "gpuwatch").stdout.strip()

    def main_pid(self) -> int:
        return int(self.prop("MainPID") or 0)

    def restarted(self, old_pid: int) -> bool:
        return self.prop("ActiveState") == "active" and self.main_pid() not in (0, old_pid)

    def wait_restart(self, old_pid: int, what: str = "the restart") -> int:
        wait_for(lambda: self.restarted(old_pid), what, 30, interval_s=0.2, detail=self.journal)
        return self.main_pid()

    # -- the journal (asynchronous: poll for a line, never read it once) --------------------------
    def cursor(self) -> str:
        out = self.box.sh("journalctl", "-n0", "--show-cursor", "--no-pager").stdout
        return out.rsplit("-- cursor: ", 1)[-1].strip()

    def journal(self, after: str = "") -> str:
        """The unit's journal (systemd's lines about it and the daemon's own), after the cursor ``after``."""
        since = [f"--after-cursor={after}"] if after else []
        return self.box.sh("journalctl", "--no-pager", "-o", "cat", "-u", "gpuwatch", *since, check=False).stdout

    def logged(self, after: str, *texts: str, timeout_s: float = 15) -> str:
        """The unit's journal after ``after`` once it holds every one of ``texts``."""

        def holds_all() -> str:
            journal = self.journal(after)
            return journal if all(text in journal for text in texts) else ""

        return wait_for(holds_all, f"journal lines {texts!r}", timeout_s, interval_s=0.2,
                        detail=lambda: self.journal(after)[-3000:])

    # -- the fake tree ---------------------------------------------------------------------------
    def fans(self, name: str = "pwm1_enable") -> list[str]:
        """``name`` of every GPU's hwmon, read from the host."""
        return [self.box.path(f"{FAKE_SYSFS}/{hwmon}/{name}").read_text().strip() for hwmon in self.hwmon]

    def handed_back(self, log: str = HANDED_BACK_LOG) -> list[str]:
        """What the probe after ExecStopPost saw, one line per stop: "2 2" = both fans on firmware auto
        (``log=CAPS_LOG``: both power caps, in microwatts)."""
        path = self.box.path(log)
        return path.read_text().splitlines() if path.exists() else []

    def caps(self) -> list[int]:
        """Every GPU's power1_cap (µW), read from the host."""
        return [int(cap) for cap in self.fans("power1_cap")]

    def heat(self) -> str:
        """Every GPU's junction 1 °C under its pause limit (crit - 10): the fan curve is at its top, so the
        power governor lowers the caps. Returns the caps as found, as the probe line records them."""
        found = " ".join(str(cap) for cap in self.caps())
        for hwmon in self.hwmon:
            crit_mc = int(self.box.path(f"{FAKE_SYSFS}/{hwmon}/temp2_crit").read_text())
            self.box.path(f"{FAKE_SYSFS}/{hwmon}/temp2_input").write_text(f"{crit_mc - 11000}\n")
        return found

    def governed(self, found: str) -> None:
        """Wait until the governor has lowered every cap below what was ``found``."""
        originals = [int(cap) for cap in found.split()]
        wait_for(lambda: all(cap < original for cap, original in zip(self.caps(), originals, strict=False)),
                 "the power governor to lower both caps", 30, interval_s=0.2, detail=self.journal)

    def recorded_modes(self) -> list[int]:
        """Every fan's original ``pwm1_enable`` as /run/gpuwatch/fan-restore.json records it, sorted."""
        records = json.loads(self.box.path("/run/gpuwatch/fan-restore.json").read_text())
        return sorted(int(record["pwm1_enable"]) for record in records.values())

    def gpuwatch(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.box.sh(GPUWATCH, *args, user=user, check=False, timeout=60)
