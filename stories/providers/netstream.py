"""The model client's connections as plain asyncio transports.

httpcore's own asyncio backend goes through anyio: every read of a streamed
reply opens a cancel scope with a deadline and asks which async library runs,
which was about a sixth of a streamed turn's CPU (bench/concurrency.py). Here
a read takes what the protocol has buffered, or waits on one future; its
timeout is a deadline the connection's one timer checks when it fires (armed
again then if the deadline moved on), not a timer made and cancelled at each
read: a streamed reply waits ~60 times, and those timers were ~4% of a web
process's CPU at 1,000 players (py-spy, bench/evening.py). Writes honour the
transport's flow control. TLS is the loop's own ``start_tls``. The errors are
httpcore's, as its backends raise them.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import httpcore2
from httpcore2._backends.base import AsyncNetworkStream

_HIGH_WATER = 256 * 1024  # bytes buffered before the socket stops being read


class _Protocol(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.drained: asyncio.Future | None = None
        self.paused_reading = False
        self.deadline: float | None = None  # the loop's time by which the waiting read must have data
        self.timer: asyncio.TimerHandle | None = None  # fires at a deadline, or before it (it moved on)

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes):
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self):
        self.eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc):
        self.eof = True
        self.error = exc
        self._wake()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def pause_writing(self):
        if self.drained is None or self.drained.done():
            self.drained = self.loop.create_future()

    def resume_writing(self):
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def _wake(self):
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def wait_for_data(self, timeout: float | None) -> None:
        """Until data or the end arrives; httpcore2.ReadTimeout after ``timeout`` seconds."""
        self.waiter = waiter = self.loop.create_future()
        if timeout is None:
            self.deadline = None
        else:
            self.deadline = deadline = self.loop.time() + timeout
            if self.timer is None or self.timer.when() > deadline:
                if self.timer is not None:
                    self.timer.cancel()
                self.timer = self.loop.call_at(deadline, self._check_deadline)
        try:
            await waiter
        finally:
            self.waiter = None

    def _check_deadline(self):
        self.timer = None
        waiter, deadline = self.waiter, self.deadline
        if waiter is None or waiter.done() or deadline is None:
            return  # nothing waits: the next wait arms the timer again
        if self.loop.time() >= deadline:
            waiter.set_exception(httpcore2.ReadTimeout())
        else:  # the deadline moved on since the timer was set (reads came meanwhile)
            self.timer = self.loop.call_at(deadline, self._check_deadline)

    def take(self, max_bytes: int) -> bytes:
        data = bytes(self.buffer[:max_bytes])
        del self.buffer[:max_bytes]
        if self.paused_reading and len(self.buffer) <= _HIGH_WATER // 4 and self.transport is not None:
            self.paused_reading = False
            self.transport.resume_reading()
        return data


def _expire(future: asyncio.Future, error: type[Exception]) -> None:
    if not future.done():
        future.set_exception(error())


async def _wait(loop, future: asyncio.Future, timeout: float | None, error: type[Exception]) -> None:
    timer = loop.call_later(timeout, _expire, future, error) if timeout is not None else None
    try:
        await future
    finally:
        if timer is not None:
            timer.cancel()


class AsyncioStream(AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol):
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.buffer and not p.eof:
            await p.wait_for_data(timeout)
        if p.buffer:
            return p.take(max_bytes)
        if p.error is not None:
            raise httpcore2.ReadError(str(p.error) or p.error.__class__.__name__)
        return b""

    def take_buffered(self) -> bytes:
        """What has arrived and was not read yet, taken without waiting."""
        return self._protocol.take(len(self._protocol.buffer))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if p.error is not None or self._transport.is_closing():
            raise httpcore2.WriteError("the connection is closed")
        self._transport.write(buffer)
        if p.drained is not None and not p.drained.done():
            await _wait(p.loop, p.drained, timeout, httpcore2.WriteTimeout)
            if p.error is not None:
                raise httpcore2.WriteError(str(p.error) or p.error.__class__.__name__)

    async def aclose(self) -> None:
        self._transport.close()
        if self._protocol.timer is not None:  # connection_lost comes on a later turn of the loop
            self._protocol.timer.cancel()
            self._protocol.timer = None

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> AsyncNetworkStream:
        loop = self._protocol.loop
        try:
            transport = await loop.start_tls(
                self._transport,
                self._protocol,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
        except (TimeoutError, asyncio.TimeoutError):
            self._transport.close()
            raise httpcore2.ConnectTimeout("the TLS handshake timed out") from None
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore2.ConnectError(str(exc)) from exc
        self._protocol.transport = transport
        return AsyncioStream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":  # an idle pooled connection with data or EOF waiting was closed by the server
            return bool(self._protocol.buffer) or self._protocol.eof
        return None


async def connect_tcp(
    host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options=None
) -> AsyncioStream:
    """A connection to ``host`` (an address already checked by the caller) as an httpcore stream."""
    loop = asyncio.get_running_loop()
    protocol = _Protocol(loop)
    try:
        async with asyncio.timeout(timeout):
            transport, _ = await loop.create_connection(
                lambda: protocol, host, port, local_addr=(local_address, 0) if local_address else None
            )
    except TimeoutError:
        raise httpcore2.ConnectTimeout(f"connecting to {host} timed out") from None
    except OSError as exc:
        raise httpcore2.ConnectError(str(exc)) from exc
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in socket_options or ():
            sock.setsockopt(*option)
    return AsyncioStream(transport, protocol)
