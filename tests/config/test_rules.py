"""Rules of the configuration's shared vocabulary (gpuwatch/config/base.py) that the slot and config tests do not
state on their own: the whole message for what is no slot, duplicate slots found past entries the other checks
refuse, and the first of systemd's runtime directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config.base import canonical_pci_slot, default_runtime_dir, distinct_slots


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
    assert default_runtime_dir({"RUNTIME_DIRECTORY": runtime_directory}, 1000) == Path(expected)
