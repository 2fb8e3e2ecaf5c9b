"""What a config reload (SIGHUP, `systemctl reload gpuwatch`) may change while the daemon runs.

Pure: given the running config and a freshly validated one, decide which top-level keys take effect
now and which wait for a restart. Live (``LIVE_KEYS``, each with every consumer it reaches): the tick
interval, the log level, the thermal limits, [fan] (all but its mode: ``RESTART_SUBKEYS``), [status],
[health] and [[trainer]]. Everything else (sysfs_root, runtime_dir, sysfs_deadline_s, power, http, ...) owns open files,
sockets or hardware control; swapping those mid-run is riskier than a restart, so the running value is
kept and the log says `systemctl restart gpuwatch` is needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuwatch.config.file import Config

# Each live key and every consumer that reads it from the configuration each tick passes on (the loop
# keeps one Config; Daemon.reload swaps it); the reload's log line names them, so nobody has to guess
# whether /metrics or the supervisor saw a change.
LIVE_KEYS: dict[str, str] = {
    "interval_s": "the tick schedule",
    "log_level": "every logger",
    "thermal": "the state file, /metrics, the power governor and the supervisor",
    "fan": "the fan controller, from its next tick",
    "status": "nothing in the daemon (`gpuwatch status --remote` reads it)",
    "health": "the health verdict and the job receipts (/metrics, the state file, `gpuwatch health`)",
    "trainer": "the supervisor (adds and removes trainers; a changed one restarts alone, the others untouched)",
    "unmanaged": "the processes not run under gpuwatch (\"report\" continues every one stopped)",
}
DAEMON_LIVE_KEYS = frozenset(LIVE_KEYS)
# Settings of a live section that still wait for a restart. fan.mode decides whether the controller exists
# (off), whether it may write at all (monitor-only, dry-run) and whether it records the way back: switching
# it hands fans over between the firmware and gpuwatch, which is the start's and the shutdown's job.
RESTART_SUBKEYS: dict[str, tuple[str, ...]] = {"fan": ("mode",)}


@dataclass(frozen=True)
class ReloadPlan:
    config: Config  # the config to run with: live keys from the new file, the rest as running
    applied: tuple[str, ...]  # changed keys that take effect now
    needs_restart: tuple[str, ...]  # changed keys kept at their running value until a restart

    def describe_applied(self) -> str:
        """``thermal (the state file, /metrics, the power governor and the supervisor), ...`` for the reload's
        log line."""
        return ", ".join(f"{key} ({LIVE_KEYS[key]})" if key in LIVE_KEYS else key for key in self.applied)


def plan_reload(running: Config, new: Config, live_keys: Iterable[str] = DAEMON_LIVE_KEYS) -> ReloadPlan:
    live = set(live_keys)
    update: dict[str, object] = {}
    applied: list[str] = []
    needs_restart: list[str] = []
    for key in type(running).model_fields:
        old_value, new_value = getattr(running, key), getattr(new, key)
        if old_value == new_value:
            continue
        if key not in live:
            needs_restart.append(key)
            continue
        kept = [sub for sub in RESTART_SUBKEYS.get(key, ()) if getattr(old_value, sub) != getattr(new_value, sub)]
        if kept:
            needs_restart += [f"{key}.{sub}" for sub in kept]
            new_value = new_value.model_copy(update={sub: getattr(old_value, sub) for sub in kept})
        if new_value != old_value:
            applied.append(key)
            update[key] = new_value
    return ReloadPlan(config=running.model_copy(update=update), applied=tuple(applied),
                      needs_restart=tuple(needs_restart))
