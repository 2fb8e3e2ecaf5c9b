"""What a GPU's reading derives from its own fields (pure, the standard library alone): one function each, the one
home of ``GpuReading``'s properties (model.py) and of the status document's light view (publish/light_view.py),
which `gpuwatch status` renders without importing model's dataclasses (issue 52)."""

from __future__ import annotations


def suspended(runtime_status: str | None) -> bool:
    """Asleep under runtime PM (the device's ``power/runtime_status``): not read, so it can sleep."""
    return runtime_status == "suspended"


def sampled_pwm_ratio(pwm: int | None, pwm_min: int | None, pwm_max: int | None) -> float | None:
    """The sampled pwm as 0-1 of the range the card reports; None without ``pwm1_max``.

    Unlike a duty the fan controller wrote (publish's fan families read those on PWM_MAX_DEFAULT's scale, the one
    the backend wrote on), a sampled pwm of a card that does not report its range is not guessed: missing is None
    (/status ``pwm_ratio``, gpuwatch_gpu_fan_duty_ratio)."""
    if pwm is None or not pwm_max:
        return None
    return pwm_ratio(pwm, pwm_min, pwm_max)


def pwm_ratio(pwm: int, pwm_min: int | None, pwm_max: int) -> float | None:
    """A raw pwm value as 0-1 of the card's pwm range (``pwm1_min`` absent: 0); None for an empty range."""
    low = pwm_min or 0
    if pwm_max <= low:
        return None
    return max(0.0, min(1.0, (pwm - low) / (pwm_max - low)))


def fan_duty(pwm_duty_ratio: float | None, board_duty_ratio: float | None) -> float | None:
    """pwm1 wins: it is what the fan is driven by; a board without one (NVML) reports a duty instead.

    A function beside ``GpuReading.fan_duty`` because a remote /status document (cli/fleet.py) carries both values
    (``pwm_ratio``, ``fan_duty_ratio``) but no reading."""
    return pwm_duty_ratio if pwm_duty_ratio is not None else board_duty_ratio
