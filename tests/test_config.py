"""Config loading: defaults, the example file, and one clear message per problem (exit code 2)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import load_config, parse_config
from gpuwatch.config.runtime import client_runtime_dir, daemon_files_in, is_simulator_dir, simulator_runtime_dir
from tests.support.paths import REPO


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(text)
    return path


def test_example_config_is_valid_and_equals_defaults() -> None:
    example = load_config(REPO / "config/gpuwatch.toml")
    assert example == load_config(None)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("interval_s = 0\n", "interval_s = 0: Input should be greater than 0"),
        ("interval_s = 'fast'\n", "interval_s = 'fast': Input should be a valid number"),
        ("intervall_s = 1\n", "intervall_s = 1: unknown key"),
        ("[thermal]\nedge_limit_c = 500\n", "thermal.edge_limit_c = 500: Input should be less than or equal to 150"),
        ("[http]\nport = 70000\n", "http.port = 70000"),
        ("log_level = 'loud'\n", "log_level = 'loud': Input should be 'debug', 'info', 'warning' or 'error'"),
        ("interval_s = \n", "not valid TOML"),
        ("[power]\nmode = 'cap'\n", "power.mode = 'cap': Input should be 'govern', 'dry-run' or 'off'"),
        ("[power]\nfloor_percent = 10\n", "power.floor_percent = 10: Input should be greater than or equal to 20"),
        ("[power]\nhold_margin_c = 9\n", "power: hold_margin_c 9 must be below engage_margin_c 8"),
        ("[power]\nreverse_step_percent = 1\n", "reverse_step_percent 1 must not be below min_step_percent 2"),
        ("[power.gpus.'0000:03:00.0']\nengage_margin_c = 1.5\n",
         "power.gpus.0000:03:00.0: hold_margin_c 2 must be below engage_margin_c 1.5"),
        ("[power.gpus.'0000:03:00.0']\nfloor = 50\n", "power.gpus.0000:03:00.0.floor = 50: unknown key"),
    ],
)
def test_bad_config_names_key_value_and_rule(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch.cli", *args], capture_output=True, text=True, timeout=60)


def test_check_config_prints_effective_config(tmp_path: Path) -> None:
    result = _cli("check-config", str(_write(tmp_path, "interval_s = 2.5\n[thermal]\nhysteresis_c = 3\n")))
    assert result.returncode == 0, result.stderr
    effective = tomllib.loads(result.stdout.split("\n", 1)[1])
    assert effective["interval_s"] == 2.5 and effective["thermal"]["hysteresis_c"] == 3
    assert effective["http"]["port"] == 9840


def test_check_config_takes_c_like_every_other_command(tmp_path: Path) -> None:
    """Issue 32 point 11: `check-config -c FILE` (as run, status, curve take it); the positional FILE still works,
    and two different files are a usage error, not one of them checked silently."""
    path = _write(tmp_path, "interval_s = 2.5\n")
    for args in (("-c", str(path)), ("--config", str(path)), (str(path),), ("-c", str(path), str(path))):
        result = _cli("check-config", *args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"# {path}: valid.") and "interval_s = 2.5" in result.stdout
    (tmp_path / "bad").mkdir()
    bad = _write(tmp_path / "bad", "interval_s = -1\n")
    assert _cli("check-config", "-c", str(bad)).returncode == 2
    both = _cli("check-config", "-c", str(path), str(bad))
    assert both.returncode == 2 and both.stdout == ""
    assert f"two files named ({path} and {bad}): check one at a time" in both.stderr


def test_bad_config_exits_2_and_daemon_does_not_start(tmp_path: Path) -> None:
    path = _write(tmp_path, "interval_s = -1\n")
    for args in (("check-config", str(path)), ("run", "-c", str(path), "--sysfs-root", str(tmp_path))):
        result = _cli(*args)
        assert result.returncode == 2
        assert "interval_s = -1" in result.stderr and "greater than 0" in result.stderr


# ---- [fan] -------------------------------------------------------------------------------------
def test_defaults_are_the_seeds_curve_with_a_50_percent_floor() -> None:
    fan = parse_config({}).fan
    assert fan.mode == "curve" and fan.sensor == "auto" and fan.floor_percent == 50
    assert fan.curve[0] == [64.0, 50.0] and fan.curve[-1] == [95.0, 100.0]


@pytest.mark.parametrize(
    "fan, expected",
    [
        ({"curve": [[70, 60], [60, 70]]}, ["fan.curve", "[[70, 60], [60, 70]]", "must be above the previous"]),
        ({"curve": [[60, 80], [70, 60]]}, ["fan.curve", "must not be below"]),
        ({"curve": [[60, 180]]}, ["fan.curve", "within 0..100"]),
        ({"floor_percent": 120}, ["fan.floor_percent", "120", "less than or equal to 100"]),
        ({"sensor": "hotspot"}, ["fan.sensor", "'hotspot'"]),
        ({"gpus": {"0000:28:00.0": {"curve": [[1, 5], [1, 6]]}}}, ["fan.gpus.0000:28:00.0.curve", "must be above"]),
        ({"gpus": {"0000:28:00.0": {"floor": 5}}}, ["fan.gpus.0000:28:00.0.floor", "unknown key"]),
    ],
)
def test_validation_messages_name_key_value_and_rule(fan: dict[str, object], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"fan": fan})
    for text in expected:
        assert text in str(err.value)


def test_per_gpu_override_merges_only_given_keys() -> None:
    fan = parse_config({"fan": {"dead_band_c": 2, "gpus": {"0000:28:00.0": {"floor_percent": 30}}}}).fan
    merged = fan.for_gpu("0000:28:00.0")
    assert merged.floor_percent == 30 and merged.dead_band_c == 2
    assert fan.for_gpu("0000:99:00.0") is fan


USER = 1000
OWN = f"/tmp/gpuwatch-{USER}"  # config/runtime.py's paths are str (no pathlib for `gpuwatch health`)
SYSTEM = "/run/gpuwatch"


@pytest.mark.parametrize(
    "environ, euid, daemons, expected",
    [
        # The installed service publishes in /run/gpuwatch: a user's `gpuwatch status` finds it there.
        ({}, USER, {SYSTEM}, SYSTEM),
        ({"XDG_RUNTIME_DIR": "/run/user/1000"}, USER, {SYSTEM}, SYSTEM),
        # The user's own daemon (same defaults) comes first.
        ({}, USER, {SYSTEM, OWN}, OWN),
        ({"XDG_RUNTIME_DIR": "/run/user/1000"}, USER, {SYSTEM, "/run/user/1000/gpuwatch"},
         "/run/user/1000/gpuwatch"),
        # No daemon anywhere: the user's own directory ("daemon not running" names it).
        ({}, USER, set(), OWN),
        # Root and the unit's own processes resolve as the daemon does.
        ({}, 0, set(), SYSTEM),
        ({"RUNTIME_DIRECTORY": "/run/other"}, USER, {SYSTEM, "/run/other"}, "/run/other"),
    ],
)
def test_client_runtime_dir_finds_the_system_service(
    environ: dict[str, str], euid: int, daemons: set[str], expected: str
) -> None:
    assert client_runtime_dir(environ, euid, lambda d: d in daemons) == expected


@pytest.mark.parametrize(
    "environ, euid, daemons, expected",
    [
        # No real daemon: this user's own simulator, else root's (`sudo gpuwatch run --simulate`).
        ({}, USER, {OWN + "-simulate", SYSTEM + "-simulate"}, OWN + "-simulate"),
        ({}, USER, {SYSTEM + "-simulate"}, SYSTEM + "-simulate"),
        ({"XDG_RUNTIME_DIR": "/run/user/1000"}, USER, {"/run/user/1000/gpuwatch-simulate"},
         "/run/user/1000/gpuwatch-simulate"),
        ({}, 0, {SYSTEM + "-simulate"}, SYSTEM + "-simulate"),
        # A real daemon always wins, the user's own or the service.
        ({}, USER, {SYSTEM, OWN + "-simulate"}, SYSTEM),
        ({}, 0, {SYSTEM, SYSTEM + "-simulate"}, SYSTEM),
        ({}, USER, set(), OWN),
    ],
)
def test_clients_find_a_simulator_when_no_real_daemon_runs(
    environ: dict[str, str], euid: int, daemons: set[str], expected: str
) -> None:
    assert client_runtime_dir(environ, euid, lambda d: d in daemons, simulators=True) == expected
    assert is_simulator_dir(expected) == expected.endswith("-simulate")
    # `gpuwatch health` (simulators off) never answers from simulated cards.
    assert not is_simulator_dir(client_runtime_dir(environ, euid, lambda d: d in daemons))


@pytest.mark.parametrize(
    "configured, euid, expected, moved",
    [
        (None, 0, SYSTEM + "-simulate", False),  # `run --simulate -c FILE` without runtime_dir: never /run/gpuwatch
        (None, USER, OWN + "-simulate", False),
        (SYSTEM, USER, SYSTEM + "-simulate", True),  # configured where real runs attach: moved, with the reason
        (SYSTEM + "/", 0, SYSTEM + "-simulate", True),
        (OWN, USER, OWN + "-simulate", True),
        ("/srv/sim", 0, "/srv/sim", False),  # any other directory: as configured
    ],
)
def test_a_simulator_never_publishes_where_real_runs_attach(
    configured: str | None, euid: int, expected: str, moved: bool
) -> None:
    runtime_dir, why = simulator_runtime_dir(configured, {}, euid)
    assert runtime_dir == expected
    assert (why is not None) == moved
    said = f"runtime_dir {configured} is where real daemons publish"
    assert why is None or (why.startswith(said) and "\n" not in why)


def test_daemon_files_in_names_the_state_file_and_the_socket(tmp_path: Path) -> None:
    config = parse_config({"runtime_dir": str(tmp_path)})
    assert not daemon_files_in(tmp_path)
    config.state_file.write_text("{}")
    assert daemon_files_in(tmp_path)
    config.state_file.unlink()
    config.control_socket.write_text("")  # only its existence counts
    assert daemon_files_in(tmp_path)
