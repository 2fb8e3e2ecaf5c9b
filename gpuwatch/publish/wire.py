"""HTTP/1.1 on the wire for the server (serve.py): the listening socket, a request head parsed, a response
encoded, the request as the routes see it (with who sent it). Pure apart from ``bind``."""

from __future__ import annotations

import email.utils
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

MAX_HEAD_BYTES = 16 * 1024  # request line + headers
MAX_BODY_BYTES = 64 * 1024  # a body is read (and ignored) so the close does not reset the response


class Stream(Protocol):
    """A body written chunk by chunk after the head until it ends or the client goes (the live page's
    /events); ``close`` is called however the response ends, sent or not."""

    def chunks(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    stream: Stream | None = None  # written after ``body``; the head then has no Content-Length


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    client: str = "?"  # the peer's address
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-case, the last value of each
    peer_cert: dict[str, Any] | None = None  # the client's certificate, verified by the TLS handshake
    user: str | None = None  # the basic auth user, once the credentials were verified

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def authenticated(self) -> bool:
        """Basic auth passed, or a certificate the configured client CA signed."""
        return self.user is not None or bool(self.peer_cert)


# The request -> the response; HEAD is answered as GET without the body.
Respond = Callable[[Request], Response]


def bind(listen: str, port: int) -> socket.socket:
    """The listening socket (IPv4 or IPv6 by the address); raises OSError (port in use, bad address)."""
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    # A deep backlog: connections are accepted at once by the loop, but a burst of SYNs must not be
    # dropped (the clients would retry after 1 s, 3 s...).
    return socket.create_server((listen, port), family=family, backlog=128)


@dataclass(frozen=True)
class Head:
    """A request's line and headers as parsed."""

    method: str
    target: str
    version: str  # "HTTP/1.1", "HTTP/1.0"
    length: int  # Content-Length, 0 without one
    headers: dict[str, str]  # names lower-case

    @property
    def keeps_alive(self) -> bool:
        """Whether the client lets the connection stay open after the answer: HTTP/1.1 without
        ``Connection: close`` (RFC 9112 9.3), and nothing after the head that the server does not read
        (a chunked body, one over ``MAX_BODY_BYTES``)."""
        tokens = {token.strip().lower() for token in self.headers.get("connection", "").split(",")}
        return (self.version == "HTTP/1.1" and "close" not in tokens and self.length <= MAX_BODY_BYTES
                and "transfer-encoding" not in self.headers)


# Headers a request may carry once only: two Authorization headers (a proxy adding its own) or two
# Content-Lengths make the request ambiguous, and Go and Python would read them differently (Go takes
# the first value, a dict the last): such a request is refused with 400 rather than guessed at.
_ONCE = ("authorization", "content-length", "host")


def parse_head(head: bytes) -> Head:
    """A request head parsed; ValueError (a short reason for the 400) when it is not HTTP/1.x, is malformed or is
    ambiguous.

    By hand rather than through ``http.client.parse_headers`` (the email package's parser: two thirds of a
    keep-alive scrape's CPU on the server's thread, issue 52). Stricter than that parser where RFC 9112 lets a
    server refuse: a folded line (5.2), whitespace or nothing before the colon (5.1), a line without one (the
    email parser took it for the start of a body and dropped the headers after it, an Authorization included),
    a CR or NUL in a value (5.5), more than ``MAX_HEADERS`` lines (http.client raised its own exception there,
    which was no 400). A line may end in a bare LF, as http.client allowed."""
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1.x request line")
    headers: dict[str, str] = {}
    seen: list[str] = []
    lines = rest.decode("latin-1").split("\n")
    if len(lines) > MAX_HEADERS + 2:  # the empty line ending the head and the one after it
        raise ValueError(f"more than {MAX_HEADERS} headers")
    for text in lines:
        text = text.removesuffix("\r")
        if not text:
            break
        name, colon, value = text.partition(":")
        if not colon or not name or " " in name or "\t" in name:
            raise ValueError("malformed header line")
        value = value.strip(" \t")
        if "\r" in value or "\0" in value:
            raise ValueError("bad character in a header value")
        name = name.lower()
        seen.append(name)
        headers[name] = value
    for once in _ONCE:
        if seen.count(once) > 1:
            raise ValueError(f"more than one {once.title()} header")
    length_text = headers.get("content-length") or "0"
    if not (length_text.isascii() and length_text.isdigit()):  # 1*DIGIT (RFC 9110 8.6): no sign, no "1_0"
        raise ValueError("bad Content-Length")
    return Head(parts[0], parts[1], parts[2], int(length_text), headers)


MAX_HEADERS = 100  # header lines in one request (http.client's own limit, _MAXHEADERS)


def accepts_gzip(headers: Mapping[str, str]) -> bool:
    """Whether ``Accept-Encoding`` names gzip (or ``*``) without ``q=0`` (RFC 9110 12.5.3)."""
    for item in headers.get("accept-encoding", "").split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        params = params.strip().lower()
        if not params.startswith("q="):
            return True
        try:
            return float(params[2:]) > 0
        except ValueError:
            return False
    return False


def encode(response: Response, with_body: bool, keep_alive: bool = False) -> bytes:
    """The response's bytes; ``keep_alive`` False says ``Connection: close`` (the server closes after it)."""
    reason = HTTPStatus(response.status).phrase
    headers = [
        ("Server", "gpuwatch"),
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Content-Type", response.content_type),
        *(() if response.stream is not None else (("Content-Length", str(len(response.body))),)),
        *(() if keep_alive else (("Connection", "close"),)),
        *response.headers,
    ]
    head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("latin-1") + (response.body if with_body else b"")
