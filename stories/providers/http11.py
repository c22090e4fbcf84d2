"""A model endpoint's HTTP/1.1 response body read a network read at a time, without h11's
per-event work.

h11 still writes the request and reads the status line and headers (it checks them); the
body is then framed here, as RFC 9112 section 6.3 frames it: none (HEAD, 1xx, 204, 304), chunked
(h11 has refused any other transfer coding), Content-Length, or until the server closes. A
streamed reply arrives in ~60 network reads, and through httpcore and h11 each read was two
events, each in an exception-mapping context: ~10% of a web process's CPU in the evening bench
(py-spy), against a slice and a search here. A read takes what arrived whole (one piece for
every chunk in it).

A connection is kept for the next request exactly when h11 would keep it: both sides on
HTTP/1.1 without ``Connection: close``, the request sent whole, the body read to its end and
nothing after it. Anything else closes it (a reply stopped midway, an answer too large).
A chunk's size line is bounded (LINE_MAX) and so are the trailers (TRAILERS_MAX); the body's
own bound is the transport's (netguard.ANSWER_MAX_BYTES)."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator

import h11
import httpcore2
from httpcore2._async.connection import AsyncHTTPConnection
from httpcore2._async.http11 import AsyncHTTP11Connection, HTTPConnectionState

LINE_MAX = 4096  # bytes: a chunk's size line with its extensions
TRAILERS_MAX = 100 * 1024  # bytes: the trailer fields after the last chunk (h11's bound for an incomplete event)
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")

_DATA, _DATA_END, _SIZE, _TRAILERS = range(4)  # where a chunked body's decoding is


class ChunkedBody:
    """A chunked body's bytes from its wire form: ``feed`` takes a network read and returns
    the body bytes it completed; ``done`` once the last chunk and its trailers have come;
    ``rest`` holds what came after the message. Raises httpcore2.RemoteProtocolError on a
    malformed or over-long frame."""

    def __init__(self):
        self.buffer = b""
        self.state = _SIZE
        self.left = 0  # bytes of the current chunk still to come
        self.trailers = 0  # bytes of trailer fields so far
        self.done = False

    @property
    def rest(self) -> bytes:
        return self.buffer if self.done else b""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.buffer += data
            return b""
        buf = self.buffer + data if self.buffer else data
        out = []
        pos, end = 0, len(buf)
        while pos < end:
            if self.state == _DATA:
                take = min(self.left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.left -= take
                if not self.left:
                    self.state = _DATA_END
            elif self.state == _DATA_END:
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise httpcore2.RemoteProtocolError("a chunk's data does not end where its size says")
                pos += 2
                self.state = _SIZE
            else:
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    if self.state == _SIZE and end - pos > LINE_MAX:
                        raise httpcore2.RemoteProtocolError("a chunk's size line is too long")
                    if self.state == _TRAILERS and self.trailers + end - pos > TRAILERS_MAX:
                        raise httpcore2.RemoteProtocolError("the trailers after the last chunk are too long")
                    break
                if self.state == _TRAILERS:  # a trailer field, or the empty line that ends the message
                    blank = line_end == pos
                    self.trailers += line_end + 2 - pos
                    pos = line_end + 2
                    if blank:
                        self.done = True
                        break
                    if self.trailers > TRAILERS_MAX:
                        raise httpcore2.RemoteProtocolError("the trailers after the last chunk are too long")
                    continue
                if line_end - pos > LINE_MAX:
                    raise httpcore2.RemoteProtocolError("a chunk's size line is too long")
                size = _SIZE_LINE.fullmatch(buf, pos, line_end)
                if size is None:
                    raise httpcore2.RemoteProtocolError("a chunk's size line is malformed")
                self.left = int(size.group(1), 16)
                pos = line_end + 2
                self.state = _DATA if self.left else _TRAILERS
        self.buffer = buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [value for key, value in headers if key.lower() == name]


def _keeps_alive(version: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    return version == b"HTTP/1.1" and not any(b"close" in v.lower() for v in _header(headers, b"connection"))


class LeanHTTP11Connection(AsyncHTTP11Connection):
    """httpcore's HTTP/1.1 connection with the response body framed and read here."""

    _framing: tuple[str, int, bool] | None = None  # (none, length, chunked or close; its length; keep-alive)
    _reusable = False
    _body: ChunkedBody | None = None  # the chunked body being read
    _left = 0  # bytes of a Content-Length body still to come
    _ended = False  # the body was read to its end

    async def _receive_response_headers(self, request):
        got = await super()._receive_response_headers(request)
        version, status, _, headers, _ = got
        self._reusable, self._body, self._ended = False, None, False
        if status == 101 or request.method == b"CONNECT":
            self._framing = None  # a tunnel or an upgrade: httpcore's own reading
            return got
        keep = _keeps_alive(version, headers) and _keeps_alive(b"HTTP/1.1", request.headers)
        if request.method == b"HEAD" or status in (204, 304) or status < 200:
            self._framing = ("none", 0, keep)
        elif _header(headers, b"transfer-encoding"):  # h11 has refused every coding but chunked
            self._framing = ("chunked", 0, keep)
        elif lengths := _header(headers, b"content-length"):  # h11 has checked it: digits, one value
            self._framing = ("length", int(lengths[0]), keep)
            self._left = int(lengths[0])
        else:
            self._framing = ("close", 0, False)
        return got

    async def _receive_response_body(self, request) -> AsyncGenerator[bytes]:
        if self._framing is None:
            async for piece in super()._receive_response_body(request):
                yield piece
            return
        kind, length, keep = self._framing
        timeout = request.extensions.get("timeout", {}).get("read")
        read, size = self._network_stream.read, self.READ_NUM_BYTES
        pending, _ = self._h11_state.trailing_data  # what came in the same reads as the headers
        rest = b""
        if kind == "chunked":
            body = self._body = ChunkedBody()
            data = pending
            while True:
                if data:
                    piece = body.feed(data)
                    if piece:
                        yield piece
                    if body.done:
                        rest = body.rest
                        break
                data = await read(size, timeout=timeout)
                if not data:
                    raise httpcore2.RemoteProtocolError("the server closed the connection inside a chunked body")
        elif kind == "length":
            data = pending
            while True:
                if data:
                    if len(data) >= length:
                        data, rest = data[:length], data[length:]
                    length -= len(data)
                    self._left = length
                    if data:
                        yield data
                if not length:
                    break
                data = await read(size, timeout=timeout)
                if not data:
                    raise httpcore2.RemoteProtocolError(
                        f"the server closed the connection with {length} bytes of its body still to come"
                    )
        elif kind == "close":
            data = pending
            while True:
                if data:
                    yield data
                data = await read(size, timeout=timeout)
                if not data:
                    break
        else:
            rest = pending
        self._ended = True  # read to its end: kept or not, as decided here
        self._reusable = keep and not rest and self._h11_state.our_state is h11.DONE

    def _ends_in_buffer(self) -> bool:
        """Whether the rest of a body its reader left has already arrived, and nothing after it
        (a reply's reader stops at its last event, [DONE]; the chunked body's end comes just
        behind it). Never waits."""
        framing, take = self._framing, getattr(self._network_stream, "take_buffered", None)
        if (
            self._ended
            or framing is None
            or not framing[2]
            or take is None
            or self._h11_state.our_state is not h11.DONE
        ):
            return False
        if framing[0] == "chunked" and self._body is not None:
            try:
                self._body.feed(take())
            except httpcore2.RemoteProtocolError:
                return False
            return self._body.done and not self._body.rest
        if framing[0] == "length":
            return len(take()) == self._left
        return False

    async def _response_closed(self) -> None:
        if not self._reusable:
            self._reusable = self._ends_in_buffer()
        if not self._reusable:  # h11 never saw the body end: httpcore closes the connection
            await super()._response_closed()
            return
        async with self._state_lock:
            self._reusable = False
            self._h11_state = h11.Connection(
                our_role=h11.CLIENT, max_incomplete_event_size=self.MAX_INCOMPLETE_EVENT_SIZE
            )
            self._state = HTTPConnectionState.IDLE
            if self._keepalive_expiry is not None:
                self._expire_at = time.monotonic() + self._keepalive_expiry


class LeanConnection(AsyncHTTPConnection):
    """A pooled connection speaking HTTP/1.1 through LeanHTTP11Connection (model endpoints are
    reached over HTTP/1.1: the pool asks for no HTTP/2)."""

    async def handle_async_request(self, request):
        if not self.can_handle_request(request.url.origin):
            raise RuntimeError(f"a request to {request.url.origin} on a connection to {self._origin}")
        try:
            async with self._request_lock:
                if self._connection is None:
                    stream = await self._connect(request)
                    self._connection = LeanHTTP11Connection(
                        origin=self._origin, stream=stream, keepalive_expiry=self._keepalive_expiry
                    )
        except BaseException:
            self._connect_failed = True
            raise
        return await self._connection.handle_async_request(request)


class LeanPool(httpcore2.AsyncConnectionPool):
    """httpcore's pool of LeanConnection (no proxies: model endpoints are reached directly)."""

    def _assign_requests_to_connections(self):
        """httpcore's pass over its connections (a closed, expired, idle and available check on each,
        a few calls apiece) without the connections serving a request, which no check would touch;
        the budget of new connections still counts them. With a turn's stream on each, that pass
        over ~200 connections, at every request and every answer's end, was 8.6% of a web
        process's CPU (py-spy, bench/evening.py at 1,000 players).

        At an answer's end (or a request's failure) with no request waiting for a connection, there is
        nothing to assign, and the pass is left to the next request: it drops what closed and closes
        what expired or is past the keep-alive bound before it assigns (a connection the server closed
        while idle is never handed on). That pass was half of the 6% the pool still cost (py-spy)."""
        if not any(request.connection is None for request in self._requests):
            return []
        serving, others, active = [], [], HTTPConnectionState.ACTIVE
        for connection in self._connections:  # a request on it: not closed, idle, available or expired
            inner = connection._connection
            (serving if inner is not None and inner._state is active else others).append(connection)
        if not serving:
            return super()._assign_requests_to_connections()
        self._connections, self._max_connections = others, self._max_connections - len(serving)
        try:  # no await inside: nothing else sees the pool meanwhile
            return super()._assign_requests_to_connections()
        finally:
            self._connections, self._max_connections = serving + self._connections, self._max_connections + len(serving)

    def create_connection(self, origin):
        return LeanConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            http1=True,
            http2=False,
            retries=self._retries,
            local_address=self._local_address,
            uds=self._uds,
            network_backend=self._network_backend,
            socket_options=self._socket_options,
        )
