"""The daemon's two servers, built from its config: HTTP (/metrics, /healthz, /status, the live page) and
the local control socket (`gpuwatch pause|resume|restart|stop|status`, attached runs).

Neither is needed to keep the GPUs safe: one that cannot start (a port in use, a web config broken since
the start's check, a socket it cannot bind) is logged and listed in the daemon's published failures, and
the daemon goes on without it (fans and supervision matter more). loop.py starts both before its first
tick and stops them first at shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import Config
from gpuwatch.daemon.attach_sessions import Sessions
from gpuwatch.daemon.compose import Parts
from gpuwatch.daemon.control import ControlServer
from gpuwatch.daemon.ladder import Guard
from gpuwatch.publish.history_store import HistoryStore
from gpuwatch.publish.http import HttpServer
from gpuwatch.publish.live_feed import LiveFeed
from gpuwatch.publish.state import StateHolder

log = logging.getLogger("gpuwatch")


def http_server(config: Config, holder: StateHolder, live: LiveFeed, failures: dict[str, str],
                history: HistoryStore | None = None) -> HttpServer | None:
    """The HTTP server ``[http]`` asks for, bound but not started; None when it is off or cannot serve (logged,
    and kept in ``failures``)."""
    http = config.http
    if not http.enabled:
        return None
    try:
        return HttpServer(holder, http.listen, http.port, web_config=http.web_config,
                          expose_sensitive=http.expose_sensitive, live=live, history=history)
    except ConfigError as exc:  # the web config broke after the start's check (load_daemon_config)
        log.error("cannot serve HTTP: %s; metrics are off", exc)
        failures["http"] = str(exc)
    except OSError as exc:
        log.error("cannot serve HTTP on %s:%d: %s; metrics are off", http.listen, http.port, exc.strerror)
        failures["http"] = f"cannot listen on {http.listen}:{http.port}: {exc.strerror}"
    return None


def start_control(parts: Parts, config: Callable[[], Config], holder: StateHolder,
                  guard: Guard) -> ControlServer | None:
    """`gpuwatch pause|resume|restart` reach the supervisor (and `simulate-reset` the simulator) through a
    local unix socket; None when neither is there, or when it cannot start (the guard logs and keeps why).
    ``config`` is the daemon's live configuration (a reload's admin group applies to the next request)."""
    trainers = parts.trainers
    handler = parts.control or (trainers.command if trainers is not None else None)
    if handler is None:
        return None
    sessions = trainers if isinstance(trainers, Sessions) else None  # attach sessions, per-peer commands
    server = ControlServer(config().control_socket, handler, document=holder.document,
                           sessions=sessions, admin_group=lambda: config().control.admin_group)
    guard("control socket", server.start, None)
    return server if "control socket" not in guard.failures else None
