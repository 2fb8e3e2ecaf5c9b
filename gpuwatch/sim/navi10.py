"""The sysfs files of one simulated RX 5600 XT (Navi 10), keyed like the captures (relative to class/drm/<card>/).

Based on the real capture ``navi10-rx5700xt-sapphire`` (tests/fixtures/amdgpu/cards; same Navi 10 die,
PCI 1002:731F, SMU11 so the fan is driven through hwmon ``pwm1``/``pwm1_enable``, SYSFS_FACTS.md §5),
embedded here so the package never needs the test fixtures at run time. Adjusted to an RX 5600 XT: 6 GiB VRAM,
150 W board power, temperature crit 100/110/105 °C (edge/junction/mem, emergency +5), fan up to 3200 RPM,
and the ``mem_info_*``/``mem_busy_percent``/``power1_input`` files the partial capture lacks. Dynamic
values (temperatures, power, RPM, pwm, busy) are rewritten by the simulator on every step.
"""

from __future__ import annotations

HWMON = "hwmon1"
VRAM_TOTAL_BYTES = 6 * 1024**3
GTT_TOTAL_BYTES = 8 * 1024**3
PWM_MAX = 255
FAN_MAX_RPM = 3200
CRIT_C = {"edge": 100, "junction": 110, "mem": 105}
TEMP_INDEX = {"edge": 1, "junction": 2, "mem": 3}


def card_files() -> dict[str, str]:
    """A fresh dict of every file of one card (the caller may change it)."""
    hw = f"device/hwmon/{HWMON}"
    files = {
        "uevent": "MAJOR=226\nMINOR=1\nDEVNAME=dri/card1\nDEVTYPE=drm_minor\n",
        "device/uevent": (
            "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_ID=1002:731F\nPCI_SUBSYS_ID=1DA2:E411\n"
            "PCI_SLOT_NAME=0000:28:00.0\nMODALIAS=pci:v00001002d0000731Fsv00001DA2sd0000E411bc03sc00i00\n"
        ),
        "device/vendor": "0x1002\n",
        "device/device": "0x731f\n",
        "device/vbios_version": "113-5E4111U-X4G\n",
        "device/power/runtime_status": "active\n",
        "device/current_link_speed": "16.0 GT/s PCIe\n",
        "device/current_link_width": "16\n",
        "device/max_link_speed": "16.0 GT/s PCIe\n",
        "device/max_link_width": "16\n",
        "device/gpu_busy_percent": "0\n",
        "device/mem_busy_percent": "0\n",
        "device/mem_info_vram_total": f"{VRAM_TOTAL_BYTES}\n",
        "device/mem_info_vram_used": f"{300 * 1024**2}\n",
        "device/mem_info_gtt_total": f"{GTT_TOTAL_BYTES}\n",
        "device/mem_info_gtt_used": f"{20 * 1024**2}\n",
        "device/pp_dpm_mclk": "0: 100Mhz \n1: 500Mhz \n2: 625Mhz \n3: 875Mhz *\n",
        "device/pp_dpm_sclk": "0: 300Mhz \n1: 1750Mhz \n",
        f"{hw}/name": "amdgpu\n",
        f"{hw}/fan1_enable": "0\n",
        f"{hw}/fan1_input": "0\n",
        f"{hw}/fan1_target": "0\n",
        f"{hw}/fan1_min": "0\n",
        f"{hw}/fan1_max": f"{FAN_MAX_RPM}\n",
        f"{hw}/freq1_input": "10000000\n",
        f"{hw}/freq1_label": "sclk\n",
        f"{hw}/freq2_input": "875000000\n",
        f"{hw}/freq2_label": "mclk\n",
        f"{hw}/in0_input": "775\n",
        f"{hw}/in0_label": "vddgfx\n",
        f"{hw}/power1_average": "25000000\n",
        f"{hw}/power1_input": "25000000\n",
        f"{hw}/power1_cap": "150000000\n",
        f"{hw}/power1_cap_default": "150000000\n",
        f"{hw}/power1_cap_max": "180000000\n",
        f"{hw}/power1_cap_min": "75000000\n",
        f"{hw}/power1_label": "PPT\n",
        # Navi 10 under automatic control: pwm1 65 (25 %), as in the capture.
        f"{hw}/pwm1": "65\n",
        f"{hw}/pwm1_enable": "2\n",
        f"{hw}/pwm1_max": f"{PWM_MAX}\n",
        f"{hw}/pwm1_min": "0\n",
    }
    for label, index in TEMP_INDEX.items():
        files[f"{hw}/temp{index}_label"] = f"{label}\n"
        files[f"{hw}/temp{index}_input"] = "40000\n"
        files[f"{hw}/temp{index}_crit"] = f"{CRIT_C[label] * 1000}\n"
        files[f"{hw}/temp{index}_crit_hyst"] = "-273150\n"
        files[f"{hw}/temp{index}_emergency"] = f"{(CRIT_C[label] + 5) * 1000}\n"
    return files
