"""sd_notify(3) with the standard library: READY/STATUS/WATCHDOG/RELOADING/STOPPING to systemd.

Protocol (systemd's sd_notify man page): one datagram of ``KEY=value`` lines to the AF_UNIX socket
named by $NOTIFY_SOCKET; a leading '@' means Linux's abstract namespace (a NUL byte). Without
$NOTIFY_SOCKET (not started by systemd, or Type=simple) every call is a no-op. A failed send is
logged (the unit would then be killed by its watchdog or start timeout, and the log says why), never
raised: notification trouble must not stop the control loop or the fans.

The watchdog interval comes from $WATCHDOG_USEC, honoured only when $WATCHDOG_PID is unset or ours;
pings go out at half of it, as sd_watchdog_enabled(3) recommends.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, MutableMapping

log = logging.getLogger("gpuwatch.sdnotify")  # the name log lines had before the move

ENV_KEYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def socket_address(value: str) -> str | None:
    """$NOTIFY_SOCKET -> an address for socket.sendto, or None when it is not a Unix socket path."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # vsock:... and other transports of newer systemd are not supported here


def watchdog_interval_s(environ: Mapping[str, str], pid: int) -> float | None:
    """The watchdog timeout in seconds if systemd armed one for this process, else None."""
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner and owner.strip() != str(pid):
        return None
    try:
        value = int(usec)
    except ValueError:
        log.error("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    return value / 1_000_000 if value > 0 else None


class Notifier:
    """Sends notifications to one socket; ``watchdog()`` rate-limits itself to half the timeout."""

    def __init__(
        self,
        notify_socket: str | None,
        watchdog_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.notify_socket = notify_socket
        self.address = socket_address(notify_socket) if notify_socket else None
        if notify_socket and self.address is None:
            log.error("NOTIFY_SOCKET=%r is not a Unix socket path: systemd notifications disabled", notify_socket)
        self.watchdog_s = watchdog_s if self.address else None
        self._monotonic = monotonic
        self._last_ping: float | None = None
        self._last_status: str | None = None
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] | None = None, unset: bool = False) -> Notifier:
        """Build from $NOTIFY_SOCKET/$WATCHDOG_*; ``unset`` removes them so children (trainers) do not
        inherit a socket they must not use (like sd_notify's unset_environment)."""
        env = os.environ if environ is None else environ
        notifier = cls(env.get("NOTIFY_SOCKET") or None, watchdog_interval_s(env, os.getpid()))
        if unset:
            for key in ENV_KEYS:
                env.pop(key, None)
        return notifier

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """One datagram of ``KEY=value`` lines; True when it was sent (or nothing to send to)."""
        if self.address is None:
            return True
        payload = "\n".join(fields).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(payload, self.address)
        except OSError as exc:
            log.error("sd_notify %s to %s failed: %s", fields[0].split("=")[0], self.notify_socket, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        fields = ["READY=1"]
        if status is not None:
            fields.append(f"STATUS={status}")
            self._last_status = status
        return self.send(*fields)

    def status(self, text: str) -> bool:
        """STATUS=text, only when it differs from the last one sent."""
        text = text.replace("\n", " ")
        if text == self._last_status:
            return True
        self._last_status = text
        return self.send(f"STATUS={text}")

    def watchdog(self, force: bool = False) -> bool:
        """WATCHDOG=1 if half the watchdog timeout has passed since the last ping (or ``force``)."""
        if self.watchdog_s is None:
            return True
        now = self._monotonic()
        if not force and self._last_ping is not None and now - self._last_ping < self.watchdog_s / 2:
            return True
        self._last_ping = now
        return self.send("WATCHDOG=1")

    def next_ping_in_s(self) -> float | None:
        """Seconds until the next watchdog ping is due (None: no watchdog) so a long wait can wake for it."""
        if self.watchdog_s is None:
            return None
        if self._last_ping is None:
            return 0.0
        return max(0.0, self._last_ping + self.watchdog_s / 2 - self._monotonic())

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) match this reload to its request.
        return self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
