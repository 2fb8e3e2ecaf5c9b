"""A GPU's names as a user writes them (`--gpu`, config keys): PCI slot spellings, an index, a DRM card.

Stdlib only: the CLI's parser and `status --gpu` read them without loading the config's models (issue 52).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A GPU's id everywhere in gpuwatch: its PCI slot as sysfs names it, the kernel's "%04x:%02x:%02x.%d" of domain,
# bus, device and function (drivers/pci/probe.c, pci_setup_device), e.g. 0000:28:00.0. A domain above ffff
# (Intel VMD's start at 10000) prints with more digits. The device is 5 bits (00-1f), the function 3 (0-7).
PCI_SLOT = re.compile(r"^(?:[0-9a-f]{4}|[1-9a-f][0-9a-f]{4,7}):[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")
# What a user may write for one: lspci's short form 28:00.0 (lspci leaves the domain out only when it is 0:
# pciutils' lspci.c prints every domain once any is non-zero), any case, NVML's 8-digit domain.
_SLOT_SPELLING = re.compile(r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{2}):(?P<device>[0-9a-f]{2})"
                            r"\.(?P<function>[0-9a-f])$", re.IGNORECASE)

def canonical_pci_slot(text: str) -> str:
    """The slot as sysfs names it (``PCI_SLOT``) for any spelling that names exactly one PCI function:
    lspci's short form (domain 0), upper case, NVML's ``00000000:2D:00.0``. Raises ValueError saying why
    for anything else (a function 8 or 9, a device above 1f, not a slot at all)."""
    match = _SLOT_SPELLING.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a PCI slot (domain:bus:device.function, like 0000:28:00.0; see gpuwatch "
                         "sensors)")
    device, function = int(match["device"], 16), int(match["function"], 16)
    if device > 0x1F:
        raise ValueError(f"{text!r}: device {match['device']} is not a PCI device number (00 to 1f)")
    if function > 7:
        raise ValueError(f"{text!r}: function {match['function']} is not a PCI function number (0 to 7)")
    return f"{int(match['domain'] or '0', 16):04x}:{match['bus'].lower()}:{device:02x}.{function}"


# `--gpu` of every command (status, sensors, curve, train): one spelling of the forms, one help text.
GPU_METAVAR = "GPU"
GPU_HELP = ("GPU: its index as `gpuwatch status` lists them (0, 1, ...), its PCI slot (0000:28:00.0, or lspci's "
            "28:00.0) or its DRM card (card1)")
_CARD_NAME = re.compile(r"^card[0-9]+$")


def gpus_listed(here: Sequence[tuple[str, str]]) -> str:
    """``0 0000:28:00.0 card1, 1 ...``: what an error about ``--gpu`` names as there."""
    return ", ".join(f"{i} {slot} {card}" for i, (slot, card) in enumerate(here)) or "none found"


def resolve_gpu(text: str, here: Sequence[tuple[str, str]]) -> str:
    """The PCI slot that ``--gpu TEXT`` means, among ``here``: (slot, DRM card) in the order `gpuwatch status`
    lists the GPUs. An index counts from 0 (as nvidia-smi -i and rocm-smi -d do), a card name is the DRM card
    (card1, as amdgpu_top and LACT show it), a slot is any spelling ``canonical_pci_slot`` reads (lspci's
    short form included) and need not be ``here`` (the caller says whether it must be). ValueError says what
    is here."""
    text = text.strip()
    listed = gpus_listed(here)
    if text.isdecimal():
        if int(text) < len(here):
            return here[int(text)][0]
        raise ValueError(f"{text}: no GPU with index {text} here (index, slot, card: {listed})")
    if _CARD_NAME.match(text):
        for slot, card in here:
            if card == text:
                return slot
        raise ValueError(f"{text}: no DRM card {text} here (index, slot, card: {listed})")
    if ":" not in text:
        raise ValueError(f"{text!r} is not an index, a PCI slot or a DRM card (index, slot, card: {listed})")
    return canonical_pci_slot(text)  # a slot misspelt: its own reason
