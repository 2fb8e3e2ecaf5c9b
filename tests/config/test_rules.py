"""Rules of the configuration (gpuwatch/config/base.py, file.py) that the slot and config tests do not state on
their own: the whole message for what is no slot, duplicate slots found past entries the other checks refuse, the
first of systemd's runtime directories; the whole error a bad file gets, the line of a byte that is not UTF-8, the
simulator's roots and the effective config's TOML."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpuwatch.config.base import ConfigError, distinct_slots
from gpuwatch.config.file import Config, effective_config_toml, load_config, parse_config
from gpuwatch.config.runtime import default_runtime_dir
from gpuwatch.config.slots import canonical_pci_slot


def test_what_is_no_slot_at_all_is_refused_with_the_form_and_where_to_find_it() -> None:
    with pytest.raises(ValueError) as err:
        canonical_pci_slot("card0")
    assert str(err.value) == ("'card0' is not a PCI slot (domain:bus:device.function, like 0000:28:00.0; "
                              "see gpuwatch sensors)")


@pytest.mark.parametrize("first", [7, "gpu0", "2d:00.8"], ids=["not-a-string", "no-slot", "no-pci-function"])
def test_two_spellings_of_one_gpu_are_found_past_an_entry_the_other_checks_refuse(first: object) -> None:
    with pytest.raises(ValueError) as err:
        distinct_slots([first, "2d:00.0", "0000:2D:00.0"])
    assert str(err.value) == "'2d:00.0' and '0000:2D:00.0' are the same GPU (0000:2d:00.0): name it once"


@pytest.mark.parametrize("runtime_directory, expected", [
    ("/run/gpuwatch", "/run/gpuwatch"),
    ("/run/gpuwatch:/run/other", "/run/gpuwatch"),  # RuntimeDirectory= with several: systemd joins them with ':'
    ("/run/a b:/run/c", "/run/a b"),
])
def test_systemds_runtime_directory_is_the_first_it_names(runtime_directory: str, expected: str) -> None:
    assert default_runtime_dir({"RUNTIME_DIRECTORY": runtime_directory}, 1000) == expected


# gpuwatch/config/file.py: loading, the error a bad file gets, the effective config.


def test_a_bad_key_is_named_by_where_it_came_from_one_line_each() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"interval_s": 0, "log_level": "x"})
    assert str(err.value) == ("config: invalid configuration (2 problem(s)):\n"
                              "  interval_s = 0: Input should be greater than 0\n"
                              "  log_level = 'x': Input should be 'debug', 'info', 'warning' or 'error'")
    with pytest.raises(ConfigError) as err:
        load_config(None, {"interval_s": 0})
    assert str(err.value).startswith("defaults: invalid configuration (1 problem(s)):\n  interval_s = 0: ")


def test_no_file_means_the_defaults() -> None:
    assert load_config(None) == Config()


def test_a_wrong_gpu_table_name_is_named_as_the_table() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"fan": {"gpus": {"0000:2d:00.0": {}, "bogus": {}}}})
    assert str(err.value) == ("config: invalid configuration (1 problem(s)):\n"
                              "  fan.gpus.\"bogus\" = 'bogus': 'bogus' is not a PCI slot (domain:bus:device.function, "
                              "like 0000:28:00.0; see gpuwatch sensors)")


def test_a_byte_that_is_not_utf8_is_placed_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_bytes(b"\n# 90\xb0C\ninterval_s = 2\n\n")  # line 2: a blank line before it, two after
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: line 2: byte 0xb0 is not UTF-8 text (TOML files are UTF-8: save the file "
                              "as UTF-8)")


def test_slots_not_present_name_every_gpu_that_is_here() -> None:
    config = parse_config({"fan": {"gpus": {"0000:2f:00.0": {}}}})
    assert config.slots_not_present({"0000:2e:00.0", "0000:2d:00.0"}) == [
        '[fan.gpus."0000:2f:00.0"]: no such GPU on this machine (0000:2d:00.0, 0000:2e:00.0): its settings apply '
        "to nothing"]


@pytest.mark.parametrize("settings", [{"simulate": {"enabled": True}}, {"backend": "simulated"}])
def test_a_simulating_config_reads_the_simulators_trees_with_amdgpu(tmp_path: Path,
                                                                    settings: dict[str, object]) -> None:
    config = parse_config({"runtime_dir": str(tmp_path), **settings}).with_effective_sysfs()
    assert (config.sysfs_root, config.proc_root, config.backend) == (
        tmp_path / "simulated-sysfs", tmp_path / "simulated-sysfs-proc", "amdgpu")


def test_a_config_that_does_not_simulate_reads_its_own_roots(tmp_path: Path) -> None:
    config = parse_config({"runtime_dir": str(tmp_path), "sysfs_root": "/x/sys", "backend": "nvml"})
    assert config.with_effective_sysfs() == config


@pytest.mark.parametrize("data", [{}, {"interval_s": 2.5, "runtime_dir": "/run/x", "fan": {"gpus": {"2d:00.0": {}}}}])
def test_the_effective_config_is_toml_that_reads_back_as_the_same_config(data: dict[str, object]) -> None:
    config = parse_config(data)
    text = effective_config_toml(config)
    assert parse_config(tomllib.loads(text)) == config
    assert "runtime_dir" in text if "runtime_dir" in data else "runtime_dir" not in text  # None keys left out


def test_the_effective_config_is_for_a_person_to_read() -> None:
    """Issue 50 item 15: the curve was 25 lines of nested arrays, with `trainer = []` and an empty `[fan.gpus]`."""
    text = effective_config_toml(parse_config({}))
    assert "curve = [[64.0, 50.0], [65.0, 60.0], [75.0, 70.0], [85.0, 85.0], [95.0, 100.0]]\n" in text
    assert "trainer = []" not in text and "[fan.gpus]" not in text and "= []" not in text
    custom = parse_config({"fan": {"curve": [[40, 30], [90, 100]], "gpus": {"2d:00.0": {"floor_percent": 70}}},
                           "trainer": [{"name": "t", "command": ["python3", "-c", "print('[1,\\n2]')"]}]})
    text = effective_config_toml(custom)
    assert "curve = [[40.0, 30.0], [90.0, 100.0]]" in text and '[fan.gpus."0000:2d:00.0"]' in text
    assert parse_config(tomllib.loads(text)) == custom
