"""The one validating decoder of the published status document (schema 1): every client reads it through here.

The state file, /status over HTTP and the control socket's ``status`` answer are JSON that anyone who can write
the file (or answer on the port) controls: valid JSON with a wrong type (``taken_unix: "soon"``, ``daemon: [1]``,
a top-level list, a job without ``job_id``) must give one line saying what is wrong, never a traceback in
`gpuwatch health`, `status`, `receipt`, `logs` or `train` (issue 46). ``document`` checks every field it knows
against ``SPECS`` and raises ``Invalid`` with the first field that is not what it should be:

* unknown keys are ignored (schema 1 allows additions: a newer daemon's document is read by an older client);
* a missing key is allowed (an older daemon's document lacks newer fields: readers ``.get`` it, the views above
  this one read it as its default, ``DEFAULTS``, else None), except the keys in ``REQUIRED``, which name the
  thing itself;
* a wrong type, a non-finite number or a bool where a number belongs is refused.

``SPECS`` is model.py's dataclasses as published, written as plain data (tests/publish/test_decode.py keeps the
two equal): `gpuwatch health` decodes on its fast path, where typing, dataclasses and pathlib may not be
imported (tests/cluster/test_health_imports.py); the other readers then build the dataclasses (publish/view.py)
or read it by attribute through the same tables (publish/light_view.py: `gpuwatch status`).
A type is ``int``, ``float``, ``str``, ``bool``, ``str|int`` or an object's name; ``?`` after it allows null;
``[T]`` is a list of T, ``{"*": T}`` an object of T by name, ``("?", T)`` a nullable list or object. The field
helpers (``need_dict`` ...) are the home of the same checks for the receipts a restarted daemon takes back
(publish/receipt_resume.py).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Invalid(ValueError):
    """A document (or a part of one) that cannot be used; the message names the field and what is wrong."""


SPECS: dict[str, dict[str, Any]] = {
    "StatusDocument": {
        "redacted": "bool", "schema": "int", "source": "str", "taken_unix": "float", "sample_duration_s": "float",
        "daemon": "DaemonDoc?", "gpus": ["GpuDoc"], "unsupported": ["UnsupportedDoc"], "trainers": ["TrainerDoc"],
        "processes": ["ProcessDoc"], "processes_unreadable": "int", "health": "HealthDoc?",
        "jobs": ["JobReceiptDoc"],
    },
    "DaemonDoc": {
        "pid": "int", "version": "str", "started_unix": "float", "ticks_total": "int", "interval_s": "float",
        "failures": ["str"], "boot_id": "str?", "taken_boottime_s": "float?",
    },
    "HealthDoc": {
        "healthy": "bool", "faults": ["HealthFaultDoc"], "notes": ["str"], "drain_after_checks": "int",
        "resume_after_checks": "int",
    },
    "HealthFaultDoc": {"code": "str", "gpu_id": "str?", "detail": "str", "line": "str"},
    "TemperatureDoc": {
        "temp_c": "float?", "crit_c": "float?", "crit_hyst_c": "float?", "emergency_c": "float?", "limit_c": "float?",
    },
    "FanControllerDoc": {
        "gpu_id": "str", "backend": "str", "mode": "str", "sensor": "str?", "sensor_temp_c": "float?",
        "target_ratio": "float?", "applied_pwm": "int?", "readback_pwm": "int?", "rpm": "int?", "stalled": "bool",
        "mode_resets_total": "int", "write_errors_total": "int", "stalls_total": "int", "message": "str?",
        "failsafe_reason": "str?", "can_rise": "bool",
    },
    "PowerGovernorDoc": {
        "gpu_id": "str", "mode": "str", "backend": "str?", "cap_w": "float?", "target_cap_w": "float?",
        "original_cap_w": "float?", "floor_cap_w": "float?", "pause_allowed": "bool", "capped_seconds_total": "float",
        "throughput_kept_ratio": "float?", "writes_total": "int", "write_errors_total": "int", "reason": "str?",
    },
    "ClockCeilingDoc": {
        "gpu_id": "str", "mode": "str", "backend": "str?", "ceiling_mhz": "float?", "target_ceiling_mhz": "float?",
        "original_mhz": "float?", "floor_mhz": "float?", "card_floor_mhz": "float?", "pause_allowed": "bool",
        "limited_seconds_total": "float", "writes_total": "int", "write_errors_total": "int", "resets_total": "int",
        "not_in_force": "bool", "reason": "str?",
    },
    "ErrorDoc": {"sensor": "str", "error": "str"},
    "GpuResetDoc": {
        "resets_total": "int", "last_reset_unix": "float?", "last_source": "str?", "last_summary": "str?",
        "dump_path": "str?", "recovering": "bool", "stuck_pids": ["int"], "stuck_past_deadline": "bool",
    },
    "UnmanagedDoc": {
        "on_hot": "str", "stopped_pids": ["int"], "stops_total": "int", "stopped_since_unix": "float?",
        "reason": "str?",
    },
    "GpuDoc": {
        "gpu_id": "str", "card": "str", "backend": "str", "name": "str?", "device_id": "str?", "subsystem_id": "str?",
        "unique_id": "str?", "vbios_version": "str?", "up": "bool", "unresponsive": "bool", "runtime_status": "str?",
        "gpu_busy_ratio": "float?", "mem_busy_ratio": "float?", "vram_used_bytes": "int?", "vram_total_bytes": "int?",
        "vram_reserved_bytes": "int?", "gtt_used_bytes": "int?", "gtt_total_bytes": "int?", "power_w": "float?",
        "power_cap_w": "float?", "power_cap_min_w": "float?", "power_cap_max_w": "float?",
        "power_cap_default_w": "float?", "sclk_hz": "float?", "mclk_hz": "float?", "vddgfx_v": "float?",
        "fan_rpm": "int?", "fan_min_rpm": "int?", "fan_max_rpm": "int?", "pwm": "int?", "pwm_min": "int?",
        "pwm_max": "int?", "pwm_enable": "int?", "fan_duty_ratio": "float?", "pcie_link_speed_gts": "float?",
        "pcie_link_width": "int?", "pcie_max_link_speed_gts": "float?", "pcie_max_link_width": "int?",
        "gpu_metrics_revision": "str?", "sclk_average_hz": "float?", "mclk_average_hz": "float?",
        "socclk_hz": "float?", "fclk_average_hz": "float?", "vddsoc_v": "float?", "vddmem_v": "float?",
        "throttle_status": "int?", "indep_throttle_status": "int?", "throttle_flags": ("?", ["str"]),
        "throttle_reasons": ("?", ["str"]), "energy_accumulator_j": "float?", "energy_joules": "float?",
        "energy_source": "str?", "throttled_s": {"*": "float"}, "pcie_slot_link_speed_gts": "float?",
        "pcie_slot_link_width": "int?", "pcie_slot_max_link_speed_gts": "float?", "pcie_slot_max_link_width": "int?",
        "pcie_aer_correctable_total": "int?", "pcie_aer_nonfatal_total": "int?", "pcie_aer_fatal_total": "int?",
        "pcie_replays_total": "int?", "gpu_busy_sampled_ratio": "float?", "sources": {"*": "str"},
        "suspended": "bool", "pwm_ratio": "float?", "temperatures": {"*": "TemperatureDoc"}, "over_limit": ["str"],
        "fan_controller": "FanControllerDoc?", "power_governor": "PowerGovernorDoc?",
        "clock_ceiling": "ClockCeilingDoc?", "errors": ["ErrorDoc"], "reset": "GpuResetDoc?",
        "unmanaged": "UnmanagedDoc?",
    },
    "UnsupportedDoc": {"card": "str", "driver": "str?", "gpu_id": "str?"},
    "TrainerGpuUseDoc": {
        "gpu_id": "str", "processes": "int", "vram_bytes": "int?", "gtt_bytes": "int?", "engine_busy_ratio": "float?",
        "kfd_vram_bytes": "int?", "kfd_cu_occupancy_ratio": "float?",
    },
    "TrainerDoc": {
        "name": "str", "phase": "str", "gpus": ["str"], "pid": "int?", "started_unix": "float?",
        "restarts_total": "int", "restarts_by_reason": [["str|int"]], "pauses_total": "int", "resumes_total": "int",
        "last_exit_code": "int?", "last_exit_reason": "str?", "steps_total": "int?", "steps_per_s": "float?",
        "last_step_age_s": "float?", "epoch": "int?", "reason": "str?", "paused_since_unix": "float?",
        "next_start_unix": "float?", "log_path": "str?", "run_energy_j": "float?", "energy_total_j": "float",
        "steps_per_kj": "float?", "gpus_used": ["str"], "gpu_use": ["TrainerGpuUseDoc"], "stuck_pids": ["int"],
        "heartbeat_read_errors_total": "int", "ranks": "int?", "ranks_held": "int?", "world_size": "int?",
        "paused_by": "str?", "origin": "str", "user": "str?", "command": "str?", "job_id": "str?",
    },
    "ProcessDoc": {
        "pid": "int", "gpu_id": "str", "command": "str", "user": "str?", "trainer": "str?", "state": "str?",
        "vram_bytes": "int?", "gtt_bytes": "int?", "engine_busy_ratio": "float?", "kfd": "bool",
        "kfd_vram_bytes": "int?", "kfd_cu_occupancy_ratio": "float?", "sampled_unix": "float?", "job_id": "str?",
    },
    "JobGpuReceiptDoc": {
        "gpu_id": "str", "energy_j": "float", "max_temps_c": {"*": "float"}, "governed_s": "float",
        "throttled_s": {"*": "float"}, "resets": "int", "gap_energy_j": "float", "energy_unseen_s": "float",
    },
    "JobReceiptDoc": {
        "job_id": "str", "user": "str?", "first_seen_unix": "float", "last_seen_unix": "float", "active": "bool",
        "paused_s": "float", "gpus": ["JobGpuReceiptDoc"], "unobserved_s": "float", "gaps": [["float"]],
        "unseen_from": "str?",
    },
}

# The keys that name the thing itself or that every reader needs: a document without one cannot be used. The
# rest may be missing (an older daemon's document), never wrong.
REQUIRED: dict[str, tuple[str, ...]] = {
    "StatusDocument": ("schema", "taken_unix"),
    "DaemonDoc": ("pid", "started_unix", "interval_s"),
    "HealthDoc": ("faults",),
    "HealthFaultDoc": ("line",),
    "GpuDoc": ("gpu_id", "card"),
    "UnsupportedDoc": ("card",),
    "TrainerDoc": ("name", "phase"),
    "ProcessDoc": ("pid", "gpu_id"),
    "JobGpuReceiptDoc": ("gpu_id", "energy_j", "max_temps_c", "governed_s", "throttled_s", "resets"),
    "JobReceiptDoc": ("job_id", "first_seen_unix", "last_seen_unix", "paused_s", "gpus"),
}

# What a missing key stands for, in the document's own terms (a missing key not here: None): model's defaults of
# the dataclasses SPECS are, which publish/view.py and the light view (publish/light_view.py) read an older
# daemon's document with (tests/publish/test_decode.py keeps them equal).
DEFAULTS: dict[str, dict[str, Any]] = {
    "StatusDocument": {"source": "daemon", "sample_duration_s": 0.0, "gpus": [], "unsupported": [], "trainers": [],
                       "processes": [], "processes_unreadable": 0, "jobs": [], "redacted": False},
    "DaemonDoc": {"ticks_total": 0, "interval_s": 1.0, "failures": []},
    "HealthDoc": {"faults": [], "notes": [], "drain_after_checks": 2, "resume_after_checks": 2},
    "FanControllerDoc": {"stalled": False, "mode_resets_total": 0, "write_errors_total": 0, "stalls_total": 0,
                         "can_rise": True},
    "PowerGovernorDoc": {"pause_allowed": True, "capped_seconds_total": 0.0, "writes_total": 0,
                         "write_errors_total": 0},
    "ClockCeilingDoc": {"pause_allowed": True, "limited_seconds_total": 0.0, "writes_total": 0,
                        "write_errors_total": 0, "resets_total": 0, "not_in_force": False},
    "GpuResetDoc": {"resets_total": 0, "recovering": False, "stuck_pids": [], "stuck_past_deadline": False},
    "UnmanagedDoc": {"stopped_pids": [], "stops_total": 0},
    "GpuDoc": {"up": True, "unresponsive": False, "throttled_s": {}, "sources": {}, "errors": [], "temperatures": {},
               "over_limit": []},
    "TrainerGpuUseDoc": {"processes": 0},
    "TrainerDoc": {"gpus": [], "restarts_total": 0, "restarts_by_reason": [], "pauses_total": 0, "resumes_total": 0,
                   "energy_total_j": 0.0, "gpus_used": [], "gpu_use": [], "stuck_pids": [],
                   "heartbeat_read_errors_total": 0, "origin": "configured"},
    "ProcessDoc": {"kfd": False},
    "JobGpuReceiptDoc": {"energy_j": 0.0, "max_temps_c": {}, "governed_s": 0.0, "throttled_s": {}, "resets": 0,
                         "gap_energy_j": 0.0, "energy_unseen_s": 0.0},
    "JobReceiptDoc": {"first_seen_unix": 0.0, "last_seen_unix": 0.0, "active": True, "paused_s": 0.0, "gpus": [],
                      "unobserved_s": 0.0, "gaps": []},
}

# The values a state's string may take: model's enums and Literals (the test keeps them equal). ``document`` lets any
# string through (`gpuwatch health` reads no mode); the readers that show one refuse another (publish/view.py, the
# light view), in one line.
CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "StatusDocument": {"source": ("daemon", "sysfs")},
    "FanControllerDoc": {"backend": ("pwm1", "gpu_od", "none"),
                         "mode": ("curve", "failsafe", "monitor-only", "dry-run", "disabled", "uncontrolled")},
    "PowerGovernorDoc": {"mode": ("idle", "governing", "floor", "unavailable", "dry-run", "off"),
                         "backend": ("hwmon", "nvml")},
    "ClockCeilingDoc": {"mode": ("idle", "limiting", "floor", "unavailable", "dry-run", "off"),
                        "backend": ("od_table", "dpm_mask", "nvml")},
    "GpuDoc": {"backend": ("amdgpu", "nvml"), "energy_source": ("accumulator", "integrated")},
    "TrainerDoc": {"phase": ("starting", "running", "pausing", "paused", "stopping", "backoff", "failed", "stopped",
                             "finished", "suspended")},
}

SCHEMA_VERSION = 1  # the one home of the version: publish/document.py writes it


def document(raw: object) -> Any:
    """``raw`` (parsed JSON) when it is a schema-1 status document; Invalid with the first field that is wrong."""
    checked = check(raw, "StatusDocument", "the document")
    if checked["schema"] != SCHEMA_VERSION:
        raise Invalid(f"schema is {checked['schema']!r}, this gpuwatch reads {SCHEMA_VERSION}")
    return checked


def check(value: object, spec: Any, where: str) -> Any:
    """``value`` when it is of ``spec`` (see the module's docstring); Invalid naming ``where`` otherwise."""
    try:
        return _check(value, spec)
    except _Wrong as exc:
        path = "".join(reversed(exc.path))
        name = path[1:] if where == "the document" and path else where + path  # a top-level field by its name
        raise Invalid(f"{name} {exc.rule}") from None


class _Wrong(Exception):
    """A part that is not what its spec says: the rule it breaks, and the path to it, innermost first. The path is
    built only on the way out of a wrong document: `gpuwatch health` decodes one on every check, and naming every
    field checked was half of the decode (f-strings of a few thousand paths at 8 GPUs)."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule
        self.path: list[str] = []


def _check(value: object, spec: Any) -> Any:
    if isinstance(spec, tuple):  # ("?", list or object spec)
        return None if value is None else _check(value, spec[1])
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise _Wrong("is not a list")
        for i, item in enumerate(value):
            try:
                _check(item, spec[0])
            except _Wrong as exc:
                exc.path.append(f"[{i}]")
                raise
        return value
    if isinstance(spec, dict) and "*" in spec:
        for key, item in _object(value).items():
            try:
                _check(item, spec["*"])
            except _Wrong as exc:
                exc.path.append(f".{key}")
                raise
        return value
    if spec.endswith("?"):
        return None if value is None else _check(value, spec[:-1])
    fields = SPECS.get(spec)
    if fields is None:
        return _scalar(value, spec)
    found = _object(value)
    for key in REQUIRED.get(spec, ()):
        if key not in found:
            raise _Wrong(f"has no {key}")
    plain = _PLAIN[spec]
    for key, item in found.items():
        # The common case first, without a call: a scalar field of the type it should have (JSON's own types).
        kind = plain.get(key)
        if kind is not None and (type(item) is kind or item is None and key in _NULLABLE[spec]) and (
                kind is not float or item is None or -_HUGE <= item <= _HUGE):  # type: ignore[operator]
            continue
        field = fields.get(key)
        if field is not None:  # an unknown key: a newer daemon's addition
            try:
                _check(item, field)
            except _Wrong as exc:
                exc.path.append(f".{key}")
                raise
    return found


# Per object spec, its scalar fields' Python types as JSON parses them (float: any finite one; the full rule,
# int where float belongs included, in _scalar) and which of them may be null.
_STR = frozenset((str,))
_HUGE = 1.7976931348623157e308  # the largest finite float: NaN and the infinities compare outside it
_NAN = float("nan")
_TYPES = {"str": str, "bool": bool, "int": int, "float": float}
_PLAIN = {name: {key: _TYPES[spec.rstrip("?")] for key, spec in fields.items()
                 if isinstance(spec, str) and spec.rstrip("?") in _TYPES} for name, fields in SPECS.items()}
_NULLABLE = {name: frozenset(key for key, spec in fields.items() if isinstance(spec, str) and spec.endswith("?"))
             for name, fields in SPECS.items()}


def _object(value: object) -> dict[str, object]:
    if not isinstance(value, dict) or not (_STR.issuperset(map(type, value))  # JSON's keys, without a loop in Python
                                           or all(isinstance(key, str) for key in value)):
        raise _Wrong("is not an object")
    return value


def _scalar(value: object, kind: str) -> object:
    """The rules of ``need_str`` (empty allowed), ``need_number`` (signed) and the other scalars, said by _Wrong."""
    if kind == "str":
        if not isinstance(value, str):
            raise _Wrong("is not a string")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise _Wrong("is not true or false")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Wrong("is not a whole number")
        return value
    if kind == "float":
        try:
            return need_number(value, "", signed=True)
        except Invalid:
            raise _Wrong("is not a number") from None
    if kind == "str|int":
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise _Wrong("is not a string or a whole number")
    raise AssertionError(f"unknown spec {kind!r}")  # pragma: no cover - SPECS is checked by tests/test_decode.py


def need_dict(raw: object, where: str) -> dict[str, object]:
    if not isinstance(raw, dict) or not all(isinstance(key, str) for key in raw):
        raise Invalid(f"{where} is not an object")
    return raw


def need_list(raw: object, where: str) -> list[object]:
    if not isinstance(raw, list):
        raise Invalid(f"{where} is not a list")
    return raw


def need_str(raw: object, where: str, empty: bool = False) -> str:
    if not isinstance(raw, str) or not (raw or empty):
        raise Invalid(f"{where} is not a string")
    return raw


def need_number(raw: object, where: str, signed: bool = False) -> float:
    """A finite number (not negative unless ``signed``); bool is not one, though Python's int says so."""
    try:
        number = float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else _NAN
    except OverflowError:  # an int of 400 digits: JSON has no bound on them
        number = _NAN
    # Finite: NaN compares false with everything (math.isfinite's rule, without math's import: a shared library
    # to load on every health check).
    if not -_HUGE <= number <= _HUGE or (number < 0 and not signed):
        raise Invalid(f"{where} is not a {'number' if signed else 'non-negative number'}")
    return number
