"""The systemd unit as systemd itself sees it (systemd-analyze verify/security) and the install and
uninstall scripts run for real into a temporary root (SYSTEMCTL is a recording stub there)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.config.file import CONFIG_ERROR_EXIT
from gpuwatch.config.trainer import TrainerConfig
from tests.support.paths import REPO, copy_source

# One worker for the module, so that its one install (the module fixture, ~10 s) is built once.
pytestmark = pytest.mark.xdist_group("install")

UNIT = REPO / "systemd" / "gpuwatch.service"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing: make system-deps installs it")
MAX_EXPOSURE = 4.5  # systemd-analyze security: "OK" band; a regression above this fails


def unit_settings(text: str) -> dict[str, list[str]]:
    """``Section.Key`` -> values in order (systemd allows repeated keys)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return settings


def one(settings: dict[str, list[str]], key: str) -> str:
    values = settings.get(key)
    assert values, f"{key} missing from the unit"
    return values[-1]


def substituted_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's gpuwatch (verify needs a real binary)."""
    gpuwatch = Path(sys.executable).parent / "gpuwatch"
    assert gpuwatch.exists(), gpuwatch
    target = tmp_path / "gpuwatch.service"
    target.write_text(UNIT.read_text().replace("/opt/gpuwatch/bin/gpuwatch", str(gpuwatch)))
    return target


def test_unit_has_the_service_contract() -> None:
    s = unit_settings(UNIT.read_text())
    assert one(s, "Service.Type") == "notify"
    assert one(s, "Service.NotifyAccess") == "main"
    assert one(s, "Service.WatchdogSec").endswith("s")
    assert one(s, "Service.Restart") == "on-failure"
    assert str(CONFIG_ERROR_EXIT) in one(s, "Service.RestartPreventExitStatus").split()
    assert one(s, "Unit.StartLimitIntervalSec") and one(s, "Unit.StartLimitBurst")
    assert one(s, "Service.ExecStopPost") == "+/opt/gpuwatch/bin/gpuwatch restore --config /etc/gpuwatch/gpuwatch.toml"
    # sh's kill builtin: minimal Debian has no /bin/kill (procps); tests/e2e/systemd reloads it for real.
    assert one(s, "Service.ExecReload") == "/bin/sh -c 'kill -HUP $$MAINPID'"
    assert one(s, "Service.KillMode") == "mixed"
    # The supervisor waits up to max(grace_s) + 10 s for trainers' checkpoints, then fans are restored.
    supervisor_stop_s = TrainerConfig.model_fields["grace_s"].default + 10
    assert int(one(s, "Service.TimeoutStopSec").rstrip("s")) >= supervisor_stop_s + 30
    assert one(s, "Service.ProtectSystem") == "strict"
    assert one(s, "Service.NoNewPrivileges") == "yes"
    # Either of these would break fan writes (/sys read-only) or ROCm (/dev/kfd, /dev/dri).
    assert s.get("Service.ProtectKernelTunables", ["no"])[-1] == "no"
    assert "Service.PrivateDevices" not in s and "Service.DeviceAllow" not in s and "Service.ProtectClock" not in s


@needs_analyze
def test_systemd_analyze_verify_prints_nothing(tmp_path: Path) -> None:
    unit = substituted_unit(tmp_path)
    done = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 0, output
    assert output == "", f"systemd-analyze verify warned:\n{output}"


def exposure(unit: Path) -> float:
    done = subprocess.run(
        [ANALYZE, "security", "--offline=yes", str(unit)], capture_output=True, text=True, timeout=60
    )
    match = re.search(r"Overall exposure level for gpuwatch.service: (\d+\.\d)", done.stdout)
    assert match, done.stdout + done.stderr
    return float(match.group(1))


@needs_analyze
def test_security_exposure_is_ok_and_documented(tmp_path: Path) -> None:
    score = exposure(substituted_unit(tmp_path))
    assert score <= MAX_EXPOSURE
    recorded = f"exposure {score:.1f}"
    assert recorded in (REPO / "docs" / "systemd.md").read_text(), f"update docs/systemd.md: {recorded}"
    assert recorded in (REPO / "README.md").read_text(), f"update README.md: {recorded}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One real install (venv + pip) shared by the checks below, from a copy of the checkout: pip builds in
    the source tree (build/, gpuwatch.egg-info), which must not be this checkout while other workers import
    from it (a CI run on three workers lost the build, 2026-11-27)."""
    root = tmp_path_factory.mktemp("root")
    source = tmp_path_factory.mktemp("source")
    copy_source(REPO, source)
    calls = root / "systemctl.calls"
    stub = root / "systemctl"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    stub.chmod(0o755)
    env = dict(
        os.environ,
        PREFIX=str(root / "opt/gpuwatch"),
        SYSCONFDIR=str(root / "etc"),
        UNITDIR=str(root / "lib/systemd/system"),
        DATADIR=str(root / "usr/share"),  # the shell completion: never the real /usr/share
        BINDIR=str(root / "usr/local/bin"),  # the `gpuwatch` link: never the real /usr/local/bin
        SYSTEMCTL=str(stub),
        PIP_INSTALL_ARGS="--no-deps",  # the venv only has to prove the package and entry point install
    )
    env.pop("DESTDIR", None)
    done = subprocess.run(["make", "-s", "install"], cwd=source, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"make install exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    yield {"root": root, "calls": calls, "env": env, "stdout": done.stdout}  # type: ignore[dict-item]


COMPLETIONS = {"usr/share/bash-completion/completions/gpuwatch": "bash",
               "usr/share/zsh/vendor-completions/_gpuwatch": "zsh",
               "usr/share/fish/vendor_completions.d/gpuwatch.fish": "fish"}


def test_install_lays_out_venv_unit_and_config(installed: dict) -> None:
    root: Path = installed["root"]
    assert (root / "opt/gpuwatch/bin/gpuwatch").exists()
    entry = subprocess.run(
        [root / "opt/gpuwatch/bin/python", "-c", "import gpuwatch.daemon.sdnotify, gpuwatch; print(gpuwatch.__file__)"],
        capture_output=True, text=True, timeout=30, cwd=root,  # not the checkout: import the installed copy
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert entry.returncode == 0 and str(root / "opt/gpuwatch") in entry.stdout, entry.stderr
    unit = (root / "lib/systemd/system/gpuwatch.service").read_text()
    assert f"ExecStart={root}/opt/gpuwatch/bin/gpuwatch run --config {root}/etc/gpuwatch/gpuwatch.toml" in unit
    assert f"ExecStopPost=+{root}/opt/gpuwatch/bin/gpuwatch restore --config {root}/etc/gpuwatch/gpuwatch.toml" in unit
    assert (root / "etc/gpuwatch/gpuwatch.toml").read_text() == (REPO / "config/gpuwatch.toml").read_text()
    assert installed["calls"].read_text().splitlines() == ["daemon-reload"]
    assert "systemctl enable --now gpuwatch" in installed["stdout"]
    # issue 50 item 3: on every user's PATH through a link to the venv's entry point
    assert os.readlink(root / "usr/local/bin/gpuwatch") == f"{root}/opt/gpuwatch/bin/gpuwatch"
    from gpuwatch.cli.completion import shipped

    for path, shell in COMPLETIONS.items():  # issue 32 point 12: completion installed with the package
        assert (root / path).read_text() == shipped(shell)


@needs_analyze
def test_installed_unit_verifies(installed: dict) -> None:
    unit = installed["root"] / "lib/systemd/system/gpuwatch.service"
    done = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and (done.stdout + done.stderr).strip() == "", done.stdout + done.stderr


def test_reinstall_keeps_an_edited_config_then_uninstall_removes_all_but_it(installed: dict) -> None:
    root: Path = installed["root"]
    config = root / "etc/gpuwatch/gpuwatch.toml"
    config.write_text("interval_s = 2.0\n")
    env = {**installed["env"], "WITH_VENV": "0"}  # the venv part ran in the fixture; this is about the config
    again = subprocess.run(["scripts/install.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert config.read_text() == "interval_s = 2.0\n" and "left as is" in again.stdout

    gone = subprocess.run(["make", "-s", "uninstall"], cwd=REPO, env=installed["env"], capture_output=True, text=True,
                          timeout=60)
    assert gone.returncode == 0, gone.stderr
    assert not (root / "opt/gpuwatch").exists()
    assert not (root / "lib/systemd/system/gpuwatch.service").exists()
    assert not any((root / path).exists() for path in COMPLETIONS)
    assert list((root / "usr/share").iterdir()) == []  # the completion folders the install made went too
    assert not (root / "usr/local/bin/gpuwatch").is_symlink()
    assert config.read_text() == "interval_s = 2.0\n"
    assert installed["calls"].read_text().splitlines()[-2:] == ["disable --now gpuwatch.service", "daemon-reload"]

    purge = subprocess.run(["scripts/uninstall.sh"], cwd=REPO, env={**installed["env"], "PURGE": "1"},
                           capture_output=True, text=True, timeout=60)
    assert purge.returncode == 0, purge.stderr
    assert not (root / "etc/gpuwatch").exists()
    assert "not a gpuwatch venv" not in purge.stderr  # already gone: nothing to say about it


def test_destdir_stages_the_unit_config_and_docs_and_refuses_a_venv(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    env = dict(os.environ, DESTDIR=str(stage), SYSTEMCTL="false")  # systemctl must not run at all
    refused = subprocess.run(["make", "-s", "install"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and not stage.exists()
    assert refused.stderr.startswith("install.sh: DESTDIR stages the unit, config and docs only; add WITH_VENV=0.")
    assert "python3 -m venv /opt/gpuwatch && /opt/gpuwatch/bin/pip install ." in refused.stderr
    staged = subprocess.run(["make", "-s", "install", "WITH_VENV=0"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=60)
    assert staged.returncode == 0, staged.stderr
    assert sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file()) == [
        "etc/gpuwatch/gpuwatch.toml", "etc/systemd/system/gpuwatch.service",
        "opt/gpuwatch/share/doc/gpuwatch/systemd.md", "usr/share/bash-completion/completions/gpuwatch",
        "usr/share/fish/vendor_completions.d/gpuwatch.fish", "usr/share/zsh/vendor-completions/_gpuwatch"]
    unit = stage / "etc/systemd/system/gpuwatch.service"
    assert "ExecStart=/opt/gpuwatch/bin/gpuwatch run --config /etc/gpuwatch/gpuwatch.toml" in unit.read_text()
    assert os.readlink(stage / "usr/local/bin/gpuwatch") == "/opt/gpuwatch/bin/gpuwatch"  # the final place
    if ANALYZE:
        # docs/systemd.md: on the build host the one expected complaint is the program not installed yet.
        done = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
        said = set((done.stdout + done.stderr).splitlines())
        assert said == {
            "gpuwatch.service: Command /opt/gpuwatch/bin/gpuwatch is not executable: No such file or directory"
        }
