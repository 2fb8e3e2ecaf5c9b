"""What a config reload (SIGHUP, `systemctl reload gpuwatch`) may change while the daemon runs.

Pure: given the running config and a freshly validated one, decide which top-level keys take effect
now and which wait for a restart. Live (``LIVE_KEYS``, each with every consumer it reaches): the tick
interval, the log level, the thermal limits and [status]. Everything else (sysfs_root, runtime_dir,
sysfs_deadline_s, fan, http, trainers, ...) owns open files, sockets, hardware control or child
processes; swapping those mid-run is riskier than a restart, so the running value is kept and the log
says `systemctl restart gpuwatch` is needed.
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
    "status": "nothing in the daemon (`gpuwatch status --remote` reads it)",
    "trainer": "the supervisor (adds and removes trainers; a changed one restarts alone, the others untouched)",
}
DAEMON_LIVE_KEYS = frozenset(LIVE_KEYS)


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
    changed = [key for key in type(running).model_fields if getattr(running, key) != getattr(new, key)]
    applied = tuple(key for key in changed if key in live)
    needs_restart = tuple(key for key in changed if key not in live)
    config = running.model_copy(update={key: getattr(new, key) for key in applied})
    return ReloadPlan(config=config, applied=applied, needs_restart=needs_restart)
