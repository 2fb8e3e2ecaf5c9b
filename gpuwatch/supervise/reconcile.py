"""A reload's change to one running trainer (effects): what takes effect at once, what restarts it alone.

The supervisor compares the reloaded ``[[trainer]]`` list with its trainers every tick
(Supervisor._reconcile): a new name starts, a name gone is stopped like at shutdown (SIGTERM, its
grace, SIGKILL) and dropped, and a trainer whose settings changed gets them here. Settings read when a
run is judged or restarted (limits, timeouts, backoff, ``gpus``, ``restart_command``, ...) apply at
once to the running run. Settings of the process itself (``PROCESS_KEYS``: its command, environment,
user, working directory, log) only reach a new process: a live run is stopped gracefully and restarted
with them (``restart_command`` and the newest checkpoint, as after any restart; once its GPUs are cool;
a manual pause carries over), the other trainers untouched. A trainer that is not running takes them for
its next start (a failed one still waits for `gpuwatch restart`).
"""

from __future__ import annotations

import logging

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.supervise.machine import LIVE
from gpuwatch.supervise.trainer import Trainer

log = logging.getLogger("gpuwatch.supervisor")

PROCESS_KEYS = ("command", "cwd", "env", "node", "user", "group", "log_dir", "log_max_bytes", "log_backups")


def changed_keys(old: TrainerConfig, new: TrainerConfig) -> list[str]:
    """The settings that differ (pure)."""
    return [key for key in type(old).model_fields if getattr(old, key) != getattr(new, key)]


def needs_restart(changed: list[str]) -> bool:
    return any(key in PROCESS_KEYS for key in changed)


def reconfigure(trainer: Trainer, new: TrainerConfig) -> None:
    """Give ``trainer`` its reloaded settings; a live run whose process settings changed restarts alone."""
    changed = changed_keys(trainer.config, new)
    restart = needs_restart(changed) and trainer.machine.phase in LIVE
    log.info("trainer %s: %s changed by a reload%s", new.name, ", ".join(changed),
             ": restarting it (graceful stop, then its new command)" if restart else "")
    trainer.reconfigure(new)
    if restart:
        trainer.commands.put("restart")
