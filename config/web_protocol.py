"""The HTTP/1.1 protocol both servers speak (the site's uvicorn and the MCP server's): uvicorn's
h11 protocol with a deadline on request headers.

uvicorn bounds the size of headers (h11) and the idle time between requests (keep-alive), but a
client that opens a connection and sends its headers a byte at a time holds the connection for as
long as it likes; a few hundred such clients hold every place the kernel queues. Here every
request's headers must have arrived whole within REQUEST_HEADER_TIMEOUT seconds of their first
byte (of the connection's opening, for the first request): past it the connection gets a 408 and
is closed. The body has its own deadline (``config.asgi_guard``), and so does a reply's stream.

Every request's scope also carries a body writer (``scope["extensions"][BODY_WRITER]``): bytes written
straight onto the connection as the response's body, from code on the event loop that is not the
request's own task (play.live_hub writes each live event once onto every page that follows it, with no
wake-up of each page's task and no pass through the ASGI send and Django's streaming response; measured,
that pass was most of what a story played together costs beyond one played alone).
"""

from __future__ import annotations

import json
import time

import h11
from h11._writers import ChunkedWriter
from uvicorn.protocols.http.h11_impl import H11Protocol

from config.asgi_guard import SECURITY_HEADERS
from config.env import env_int

HEADER_TIMEOUT_DEFAULT_S = 10
BODY_WRITER = "everlore.body_writer"  # the scope extension's name
ARRIVED = "everlore.arrived"  # the scope extension: the wall-clock time the request's head was read
BACKED_UP_BYTES = 512 * 1024  # a connection whose unsent bytes pass this is backed up: its writer says so


def arrived(scope) -> float:
    """When the request reached the site (the wall clock as its head was read, under the site's own
    server; else now): what orders a story's line of turns (play.turn_line)."""
    return (scope or {}).get("extensions", {}).get(ARRIVED) or time.time()


def header_timeout_s() -> int:
    """REQUEST_HEADER_TIMEOUT, read from the environment (the protocol is loaded before Django's settings)."""
    return env_int("REQUEST_HEADER_TIMEOUT", HEADER_TIMEOUT_DEFAULT_S, minimum=1, maximum=600)


def _timeout_answer(seconds: int) -> bytes:
    body = json.dumps(
        {
            "detail": f"the request's headers did not arrive within {seconds} seconds; send them again",
            "error": "request_timeout",
        }
    ).encode()
    head = [
        b"HTTP/1.1 408 Request Timeout",
        b"content-type: application/json",
        b"connection: close",
        b"content-length: " + str(len(body)).encode(),
        *(k + b": " + v for k, v in SECURITY_HEADERS),
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class HeaderDeadlineProtocol(H11Protocol):
    """H11Protocol whose request headers must arrive within ``header_timeout_s()``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout_s()
        self.header_deadline = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # part of a request's headers (the first, or the next on a kept-alive connection)
        else:
            self._disarm()  # the headers are in: the body and the reply have their own deadlines

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:  # a request just parsed: its app has not run yet
            extensions = cycle.scope.setdefault("extensions", {})
            if BODY_WRITER not in extensions:
                extensions[BODY_WRITER] = BodyWriter(cycle)
                extensions[ARRIVED] = time.time()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self.header_deadline is None:
            self.header_deadline = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _headers_too_slow(self) -> None:
        self.header_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        self.logger.info("Closed a connection whose request headers took over %s s", self.header_timeout)
        self.transport.write(_timeout_answer(self.header_timeout))
        self.transport.close()


class BodyWriter:
    """Writes bytes as the body of a response whose head is sent and whose end is not (a stream), as
    the ASGI send would (h11's framing), from any code on the event loop. Its answer: whether the
    connection still takes bytes (False once it closed, the response ended, or BACKED_UP_BYTES wait
    unsent: the writer's caller ends the stream rather than holding more for a reader that stopped)."""

    __slots__ = ("cycle",)

    def __init__(self, cycle):
        self.cycle = cycle

    def takes(self) -> bool:
        """Whether a body may be written now: the response's head is sent, its end is not, and the
        connection is open."""
        cycle = self.cycle
        return not (
            cycle.disconnected or not cycle.response_started or cycle.response_complete or cycle.transport.is_closing()
        )

    def behind(self) -> bool:
        """Whether the reader is behind (the transport paused writing): a caller that must not run ahead
        of it waits through the ASGI send (an empty body part), which waits for the drain."""
        return self.cycle.flow.write_paused and not self.cycle.disconnected

    def __call__(self, data: bytes) -> bool:
        cycle = self.cycle
        transport = cycle.transport
        if not self.takes():
            return False
        if cycle.scope["method"] != "HEAD":  # a HEAD's answer has no body (uvicorn's send drops it too)
            conn = cycle.conn
            if type(getattr(conn, "_writer", None)) is ChunkedWriter and conn.our_state is h11.SEND_BODY:
                if data:  # framed as h11's chunked writer frames it, without its state machine's pass a piece
                    transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            else:
                try:
                    transport.write(conn.send(h11.Data(data=data)))
                except h11.LocalProtocolError:  # the connection's state took no body (it failed meanwhile)
                    return False
        return transport.get_write_buffer_size() <= BACKED_UP_BYTES
