"""A GPU's PCI slot, the one id every part names it by: the kernel's form (domain:bus:device.function, lower case,
a 4-digit domain unless it is above ffff), what spellings are read as it, and what is refused (issue 31 point 1,
issue 40 point 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import parse_config
from gpuwatch.config.slots import PCI_SLOT, canonical_pci_slot, resolve_gpu
from gpuwatch.gpus.amdgpu import discover
from gpuwatch.gpus.nvml import normalise_bus_id
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.trees import capture


@pytest.mark.parametrize("text, slot", [
    ("0000:2d:00.0", "0000:2d:00.0"),  # already as sysfs names it
    ("2d:00.0", "0000:2d:00.0"),  # lspci's short form: lspci leaves out domain 0 only
    ("0000:2D:00.0", "0000:2d:00.0"),  # upper case (lspci -D on some tools, BIOS screens)
    ("2D:1F.7", "0000:2d:1f.7"),  # the highest device and function
    ("00000000:2D:00.0", "0000:2d:00.0"),  # NVML's 8-digit domain
    ("00000001:ab:00.1", "0001:ab:00.1"),  # a second domain keeps its number
    ("0001:ab:00.1", "0001:ab:00.1"),
    ("00010000:e1:00.0", "10000:e1:00.0"),  # Intel VMD's domains start above ffff: sysfs prints every digit
    ("10000:e1:00.0", "10000:e1:00.0"),
    ("  0000:2d:00.0 ", "0000:2d:00.0"),
])
def test_a_spelling_that_names_one_gpu_is_kept_as_sysfs_names_it(text: str, slot: str) -> None:
    assert canonical_pci_slot(text) == slot
    assert PCI_SLOT.match(slot)


@pytest.mark.parametrize("text, why", [
    ("0000:2d:00.8", "function 8 is not a PCI function number (0 to 7)"),  # the function is 3 bits
    ("0000:2d:00.9", "function 9 is not a PCI function number (0 to 7)"),
    ("0000:2d:00.a", "function a is not a PCI function number (0 to 7)"),
    ("0000:2d:20.0", "device 20 is not a PCI device number (00 to 1f)"),  # the device is 5 bits
    ("0000:2d:ff.0", "device ff is not a PCI device number (00 to 1f)"),
    ("card0", "is not a PCI slot"),
    ("2d:0.0", "is not a PCI slot"),  # lspci always writes two digits: a one-digit device is a typo
    ("0000:2d:00", "is not a PCI slot"),
    ("000000000:2d:00.0", "is not a PCI slot"),  # more than 32 bits of domain
    ("", "is not a PCI slot"),
])
def test_a_spelling_that_names_no_pci_function_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        canonical_pci_slot(text)
    assert why in str(err.value)


@pytest.mark.parametrize("text", ["0000:2D:00.0", "0000:2d:00.8", "0000:2d:20.0", "00000000:2d:00.0", "0000:2d:00"])
def test_the_kernels_form_matches_nothing_else(text: str) -> None:
    """PCI_SLOT is the form sysfs names a GPU by (its readings' gpu_id): upper case, a function above 7, a device
    above 1f and a padded domain are never a GPU's id."""
    assert not PCI_SLOT.match(text)


HERE = [("0000:03:00.0", "card0"), ("0000:28:00.0", "card1")]


@pytest.mark.parametrize("text, slot", [
    ("0", "0000:03:00.0"), ("1", "0000:28:00.0"),  # an index, as status lists them (nvidia-smi -i)
    ("card1", "0000:28:00.0"),  # the DRM card (amdgpu_top, LACT)
    ("28:00.0", "0000:28:00.0"), ("0000:28:00.0", "0000:28:00.0"), ("0000:2D:00.0", "0000:2d:00.0"),  # any slot
    (" 1 ", "0000:28:00.0"),
])
def test_one_gpu_form_for_every_command(text: str, slot: str) -> None:
    assert resolve_gpu(text, HERE) == slot


@pytest.mark.parametrize("text, why", [
    ("2", "2: no GPU with index 2 here (index, slot, card: 0 0000:03:00.0 card0, 1 0000:28:00.0 card1)"),
    ("card7", "card7: no DRM card card7 here (index, slot, card: 0 0000:03:00.0 card0, 1 0000:28:00.0 card1)"),
    ("gpu0", "'gpu0' is not an index, a PCI slot or a DRM card (index, slot, card: 0 0000:03:00.0 card0, 1 "
             "0000:28:00.0 card1)"),
    ("0000:03:00.8", "function 8 is not a PCI function number (0 to 7)"),
])
def test_a_gpu_that_is_not_here_says_what_is(text: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        resolve_gpu(text, HERE)
    assert why in str(err.value)


@pytest.mark.parametrize("raw, gpu_id", [
    ("00000000:1B:00.0", "0000:1b:00.0"),
    ("00000001:1B:00.0", "0001:1b:00.0"),  # a domain mask that loses bits would merge GPUs of two domains
    ("0000FFFF:1B:00.0", "ffff:1b:00.0"),
    ("00010000:1B:00.0", "10000:1b:00.0"),  # above 16 bits: as sysfs names it, not masked to domain 0000
    ("not a bus id", "not a bus id"),
])
def test_nvml_bus_ids_become_the_slot_sysfs_names(raw: str, gpu_id: str) -> None:
    assert normalise_bus_id(raw) == gpu_id


def _trainer(**settings: object) -> dict[str, object]:
    return {"name": "t", "command": ["true"], **settings}


def test_a_trainers_gpus_are_read_as_the_same_slots_as_the_fan_and_power_tables() -> None:
    """Issue 31 point 1: ``gpus = ["2d:00.0"]`` for the card 0000:2d:00.0 matched no GPU, so the trainer's limits
    watched nothing. Every slot in the config is one type: written any unambiguous way, kept as sysfs names it."""
    config = parse_config({"trainer": [_trainer(gpus=["2d:00.0", "0000:2E:00.0"])],
                           "fan": {"gpus": {"2D:00.0": {"floor_percent": 60}}},
                           "power": {"gpus": {"00000000:2e:00.0": {"floor_percent": 70}}}})
    assert config.trainer[0].gpus == ["0000:2d:00.0", "0000:2e:00.0"]
    assert list(config.fan.gpus) == ["0000:2d:00.0"] and config.fan.for_gpu("0000:2d:00.0").floor_percent == 60
    assert list(config.power.gpus) == ["0000:2e:00.0"] and config.power.for_gpu("0000:2e:00.0").floor_percent == 70


@pytest.mark.parametrize("data, expected", [
    ({"trainer": [_trainer(gpus=["2d:00.8"])]},
     "trainer.0.gpus.0 = '2d:00.8': '2d:00.8': function 8 is not a PCI function number (0 to 7)"),
    ({"trainer": [_trainer(gpus=["gpu0"])]}, "trainer.0.gpus.0 = 'gpu0': 'gpu0' is not a PCI slot"),
    ({"trainer": [_trainer(gpus=["2d:00.0", "0000:2D:00.0"])]},
     "'2d:00.0' and '0000:2D:00.0' are the same GPU (0000:2d:00.0): name it once"),
    ({"fan": {"gpus": {"0000:2D:00.0": {}, "2d:00.0": {}}}},
     "fan.gpus: '0000:2D:00.0' and '2d:00.0' are the same GPU (0000:2d:00.0): name it once"),
    ({"power": {"gpus": {"2d:00.0": {}, "0000:2d:00.0": {}}}},
     "power.gpus: '2d:00.0' and '0000:2d:00.0' are the same GPU (0000:2d:00.0): name it once"),
])
def test_a_slot_that_is_ambiguous_or_no_slot_is_refused(data: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert expected in str(err.value)


def test_slots_named_in_the_config_that_are_not_here_are_one_line_each() -> None:
    config = parse_config({"trainer": [_trainer(gpus=["2e:00.0", "2d:00.0"])],
                           "fan": {"gpus": {"0000:99:00.0": {}, "0000:2d:00.0": {}}},
                           "power": {"gpus": {"0000:98:00.0": {}}}})
    assert config.slots_not_present({"0000:2d:00.0"}) == [
        '[fan.gpus."0000:99:00.0"]: no such GPU on this machine (0000:2d:00.0): its settings apply to nothing',
        '[power.gpus."0000:98:00.0"]: no such GPU on this machine (0000:2d:00.0): its settings apply to nothing',
        "trainer 't' gpus: no GPU 0000:2e:00.0 on this machine (0000:2d:00.0): its thermal limits watch nothing "
        "there",
    ]
    assert config.slots_not_present({"0000:2d:00.0"}, tables=False) == [
        "trainer 't' gpus: no GPU 0000:2e:00.0 on this machine (0000:2d:00.0): its thermal limits watch nothing "
        "there",
    ]
    assert config.slots_not_present({"0000:2d:00.0", "0000:2e:00.0", "0000:98:00.0", "0000:99:00.0"}) == []
    assert "(none found)" in config.slots_not_present(set())[0]


@pytest.mark.parametrize("slot", ["0000:2d:00.0", "0001:03:00.0", "10000:e1:00.0"])
@pytest.mark.parametrize("uevent_names_it", [True, False])
def test_sysfs_discovery_and_the_config_agree_on_a_gpus_slot(tmp_path: Path, slot: str, uevent_names_it: bool) -> None:
    """The amdgpu source takes a GPU's id from the kernel (uevent's PCI_SLOT_NAME, else the PCI device directory's
    name: both are the kernel's "%04x:%02x:%02x.%d"); every spelling of it in the config means that id."""
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"), pci_slot=slot)
    if not uevent_names_it:
        uevent = tree.root / card.device_dir / "uevent"
        uevent.write_text("".join(line for line in uevent.read_text().splitlines(keepends=True)
                                  if not line.startswith("PCI_SLOT_NAME=")))
    (found,) = discover(Sysfs(tree.root)).cards
    assert found.gpu_id == slot and PCI_SLOT.match(found.gpu_id)
    domain, bus_device_function = slot.split(":", 1)
    spellings = [slot.upper(), f"{int(domain, 16):08x}:{bus_device_function}"]
    spellings += [bus_device_function] if int(domain, 16) == 0 else []
    for spelling in spellings:
        config = parse_config({"trainer": [_trainer(gpus=[spelling])]})
        assert config.trainer[0].gpus == [found.gpu_id]
