"""The sysfs files of one simulated RX 5600 XT (Navi 10), keyed like the captures (relative to class/drm/<card>/).

Based on the real capture ``navi10-rx5700xt-sapphire`` (tests/fixtures/amdgpu/cards; same Navi 10 die,
PCI 1002:731F, SMU11 so the fan is driven through hwmon ``pwm1``/``pwm1_enable``, SYSFS_FACTS.md §5),
embedded here so the package never needs the test fixtures at run time. Adjusted to an RX 5600 XT: 6 GiB VRAM,
150 W board power, temperature crit 100/110/105 °C (edge/junction/mem, emergency +5), fan up to 3200 RPM,
and the ``mem_info_*``/``mem_busy_percent``/``power1_input`` files the partial capture lacks. Dynamic
values (temperatures, power, RPM, pwm, busy) are rewritten by the simulator on every step, and so is
the binary ``gpu_metrics`` table (v1.3, what navi10_ppt.c publishes since Linux 5.14; built by
``gpu_metrics``).
"""

from __future__ import annotations

from gpuwatch.gpus.gpu_metrics_layouts import LAYOUTS, encode

HWMON = "hwmon1"
VRAM_TOTAL_BYTES = 6 * 1024**3
GTT_TOTAL_BYTES = 8 * 1024**3
PWM_MAX = 255
FAN_MAX_RPM = 3200
CRIT_C = {"edge": 100, "junction": 110, "mem": 105}
TEMP_INDEX = {"edge": 1, "junction": 2, "mem": 3}
# The PCI core's AER counters of a healthy card (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats:
# every named bit, then the total); amdgpu's pcie_replay_count beside them.
_AER_BITS = {
    "correctable": ("RxErr BadTLP BadDLLP Rollover Timeout NonFatalErr CorrIntErr HeaderOF", "TOTAL_ERR_COR"),
    **{kind: ("Undefined DLP SDES TLP FCP CmpltTO CmpltAbrt UnxCmplt RxOF MalfTLP ECRC UnsupReq ACSViol "
              "UncorrIntErr BlockedTLP AtomicOpBlocked TLPBlockedErr PoisonTLPBlocked", total)
       for kind, total in (("nonfatal", "TOTAL_ERR_NONFATAL"), ("fatal", "TOTAL_ERR_FATAL"))},
}
# The simulated firmware reports a hotspot throttle (SMU_THROTTLER_TEMP_HOTSPOT) from here on.
HOTSPOT_THROTTLE_C = CRIT_C["junction"] - 10
_TEMP_HOTSPOT_BITS = (1 << 2, 1 << 36)  # (navi10 firmware bit THROTTLER_TEMP_HOTSPOT, SMU_THROTTLER_TEMP_HOTSPOT)
POWER_CAP_UW, POWER_CAP_MIN_UW, POWER_CAP_MAX_UW = 150_000_000, 75_000_000, 180_000_000
# The top of pp_dpm_sclk, and the clock the simulator reports when the card idles.
SCLK_MAX_MHZ, SCLK_IDLE_MHZ = 1750, 10


def gpu_metrics(edge_c: float, junction_c: float, mem_c: float, power_w: float, busy: float, sclk_mhz: float,
                vddgfx_mv: float, fan_rpm: float, now_ns: int) -> bytes:
    """One v1.3 table of the simulated card (whole °C, W, %, MHz, mV, RPM, as SMU11 fills it; the energy
    accumulator stays all ones: navi10_ppt.c does not fill it on Navi 10)."""
    hot = junction_c >= HOTSPOT_THROTTLE_C
    return encode(LAYOUTS[(1, 3)], {
        "temperature_edge": round(edge_c), "temperature_hotspot": round(junction_c), "temperature_mem": round(mem_c),
        "temperature_vrgfx": round(edge_c + power_w * 0.05), "temperature_vrsoc": round(edge_c - 2),
        "temperature_vrmem": round(mem_c - 3), "average_gfx_activity": round(busy * 100),
        "average_umc_activity": round(busy * 60), "average_mm_activity": 0, "average_socket_power": round(power_w),
        "system_clock_counter": now_ns, "average_gfxclk_frequency": round(sclk_mhz), "current_gfxclk": round(sclk_mhz),
        "average_uclk_frequency": 875, "current_uclk": 875, "current_socclk": 1000, "current_fan_speed": round(fan_rpm),
        "throttle_status": _TEMP_HOTSPOT_BITS[0] if hot else 0, "pcie_link_width": 16, "pcie_link_speed": 160,
        "voltage_gfx": round(vddgfx_mv), "voltage_soc": 850, "voltage_mem": 1350,
        "indep_throttle_status": _TEMP_HOTSPOT_BITS[1] if hot else 0,
    })


def card_files(fan1_input: bool = True) -> dict[str, str]:
    """A fresh dict of every file of one card (the caller may change it); ``fan1_input=False``: no
    hwmon tach (fan1_input, fan1_target), as RDNA4 on Linux 6.11-6.14, so the RPM is in gpu_metrics only."""
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
        "device/pp_dpm_sclk": f"0: 300Mhz \n1: {SCLK_MAX_MHZ}Mhz \n",
        "device/pcie_replay_count": "0\n",
        **{f"device/aer_dev_{kind}": "".join(f"{name} 0\n" for name in (*names.split(), total))
           for kind, (names, total) in _AER_BITS.items()},
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
        f"{hw}/power1_cap": f"{POWER_CAP_UW}\n",
        f"{hw}/power1_cap_default": f"{POWER_CAP_UW}\n",
        f"{hw}/power1_cap_max": f"{POWER_CAP_MAX_UW}\n",
        f"{hw}/power1_cap_min": f"{POWER_CAP_MIN_UW}\n",
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
    if not fan1_input:
        del files[f"{hw}/fan1_input"], files[f"{hw}/fan1_target"]
    return files
