"""Where Alertmanager delivers in tests: an HTTP webhook sink and a minimal SMTP sink, in the test process.

Every HTTP POST (any path: /webhook for webhook_configs, /chat for slack_configs, /ntfy?... for the
ntfy-style webhook) and every mail becomes one ``Delivery``. Both listen on 127.0.0.1, ports picked by
the kernel; ``with NotificationSink() as sink:`` starts and stops them. The SMTP side speaks what
Alertmanager's client sends without TLS (EHLO, MAIL, RCPT, DATA, QUIT): a recorder, not a mail server.
"""

from __future__ import annotations

import email
import json
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Delivery:
    kind: str  # "http" or "smtp"
    path: str = ""  # http: the request path with its query
    body: Any = None  # http: the JSON body (text when not JSON)
    recipients: tuple[str, ...] = ()  # smtp
    data: str = ""  # smtp: the message as sent (headers, quoted-printable parts)
    at: float = field(default_factory=time.monotonic)  # when it arrived (time.monotonic())

    @property
    def route(self) -> str:
        """The path without its query (``/ntfy``), or ``smtp``."""
        return self.path.split("?", 1)[0] if self.kind == "http" else "smtp"

    def mail_text(self) -> str:
        """The decoded text/plain part of a mail (Alertmanager sends quoted-printable: °C is =C2=B0)."""
        message = email.message_from_string(self.data)
        part = next(p for p in message.walk() if p.get_content_type() == "text/plain")
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        return payload.decode()

    def subject(self) -> str:
        return str(email.message_from_string(self.data)["Subject"])


@dataclass
class _Log:
    lock: threading.Lock = field(default_factory=threading.Lock)
    entries: list[Delivery] = field(default_factory=list)

    def add(self, delivery: Delivery) -> None:
        with self.lock:
            self.entries.append(delivery)


class NotificationSink:
    def __init__(self) -> None:
        self._log = _Log()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _http_handler(self._log))
        self._http.daemon_threads = True
        self._smtp = _SmtpServer(("127.0.0.1", 0), _smtp_handler(self._log))
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self._http, self._smtp)]

    @property
    def http_port(self) -> int:
        return int(self._http.server_address[1])

    @property
    def smtp_port(self) -> int:
        return int(self._smtp.server_address[1])

    def deliveries(self) -> list[Delivery]:
        with self._log.lock:
            return list(self._log.entries)

    def __enter__(self) -> NotificationSink:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for server in (self._http, self._smtp):
            server.shutdown()
            server.server_close()


def _http_handler(log: _Log) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            log.add(Delivery("http", path=self.path, body=body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class _SmtpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _smtp_handler(log: _Log) -> type[socketserver.StreamRequestHandler]:
    class Handler(socketserver.StreamRequestHandler):
        def reply(self, line: str) -> None:
            self.wfile.write((line + "\r\n").encode())

        def handle(self) -> None:
            recipients: list[str] = []
            self.reply("220 127.0.0.1 gpuwatch-test-sink ESMTP")
            while line := self.rfile.readline():
                verb = line.decode("utf-8", "replace").strip()
                upper = verb.upper()
                if upper.startswith(("EHLO", "HELO")):
                    self.wfile.write(b"250-127.0.0.1\r\n250 8BITMIME\r\n")  # no STARTTLS, no AUTH offered
                elif upper.startswith("RCPT TO:"):
                    recipients.append(verb[8:].strip(" <>"))
                    self.reply("250 ok")
                elif upper == "DATA":
                    self.reply("354 end with .")
                    data = []
                    while (chunk := self.rfile.readline()) not in (b".\r\n", b".\n", b""):
                        data.append(chunk.decode("utf-8", "replace"))
                    log.add(Delivery("smtp", recipients=tuple(recipients), data="".join(data)))
                    recipients = []
                    self.reply("250 queued")
                elif upper == "QUIT":
                    self.reply("221 bye")
                    return
                elif upper.startswith(("MAIL FROM:", "RSET", "NOOP")):
                    self.reply("250 ok")
                else:
                    self.reply("502 not implemented")

    return Handler
