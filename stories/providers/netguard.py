"""Outbound requests to user-supplied model endpoints.

Unless ALLOW_PRIVATE_ENDPOINTS is on, an endpoint must resolve only to public
addresses. The URL is checked when saved, and every connection resolves the
host once, checks each address, and connects to the checked address itself,
so a DNS answer that changes between check and connect gains nothing.
Redirects are never followed and proxy variables are ignored.

A call a request waits on runs within ``deadline``: every wait of it (the resolver, connecting,
TLS, each read and write) ends by then, however slowly the endpoint trickles its bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import socket
import ssl
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpcore2
import httpx2
from django.conf import settings
from httpcore2._backends.base import AsyncNetworkBackend, NetworkStream
from httpcore2._backends.sync import SyncBackend
from httpcore2._synchronization import AsyncShieldCancellation
from httpx2._transports.default import map_httpcore_exceptions

import stories.providers.http11 as http11
import stories.providers.netstream as netstream
from config.async_db import before_waiting_outside
from config.errors import InvalidRequest


class EndpointRefused(InvalidRequest):
    """The endpoint URL is not allowed; the message says why (a 400 on endpoint_url)."""

    code = "endpoint_refused"
    field = "endpoint_url"


def check_url_shape(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL without credentials, or EndpointRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise EndpointRefused("the endpoint URL is malformed") from None
    if parts.scheme not in {"http", "https"}:
        raise EndpointRefused("the endpoint URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise EndpointRefused(
            "the endpoint URL must not contain a user name or password; put the key in the API key field"
        )
    if not parts.hostname:
        raise EndpointRefused("the endpoint URL has no host")
    try:
        httpx2.URL(url)  # the client's own parser: what it refuses would fail every turn
    except httpx2.InvalidURL as exc:
        raise EndpointRefused(f"the endpoint URL is malformed: {exc}") from None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def address_problem(ip: str) -> str | None:
    """Why connecting to ``ip`` is refused on a hosted site, or None if it is public."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = addr.ipv4_mapped or addr.sixtofour or (addr.teredo[1] if addr.teredo else None)
        if embedded is not None:
            inner = address_problem(str(embedded))
            if inner:
                return f"{inner} (inside an IPv6 address)"
    if addr.is_loopback:
        return "a loopback address"
    if addr.is_link_local:
        return "a link-local address (cloud metadata lives here)"
    if addr.is_unspecified:
        return "an unspecified address"
    if addr.is_multicast:
        return "a multicast address"
    if addr.is_private:
        return "a private-network address"
    if addr.is_reserved or not addr.is_global:
        return "a reserved address"
    return None


_deadline = threading.local()
RESOLVERS_MAX = 32  # lookups under a deadline at once per process (a lookup past its deadline finishes here)
_resolvers = ThreadPoolExecutor(max_workers=RESOLVERS_MAX, thread_name_prefix="resolve")


@contextmanager
def deadline(seconds: float):
    """This thread's model calls inside end by ``seconds`` from now: each wait on the endpoint
    (the resolver, connecting, TLS, a read, a write) waits at most what is left, and none
    starts once it has passed (httpcore's timeout errors). 0: no deadline."""
    if not seconds:
        yield
        return
    outer = getattr(_deadline, "at", None)
    at = time.monotonic() + seconds
    _deadline.at = at if outer is None else min(outer, at)
    try:
        yield
    finally:
        _deadline.at = outer


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of this thread's deadline; ``error`` once nothing is."""
    at = getattr(_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


def resolve_checked(host: str, port: int) -> list[tuple]:
    """getaddrinfo results for host, all checked; EndpointRefused otherwise. Under a ``deadline``
    a lookup that does not finish in time is httpcore's ConnectTimeout."""
    try:
        if getattr(_deadline, "at", None) is None:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        else:
            lookup = _resolvers.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
            try:
                infos = lookup.result(timeout=_left(None, httpcore2.ConnectTimeout))
            except FutureTimeout:
                raise httpcore2.ConnectTimeout(f"the endpoint host {host!r} did not resolve in time") from None
    except (socket.gaierror, UnicodeError):
        raise EndpointRefused(f"the endpoint host {host!r} does not resolve") from None
    return _checked(host, infos)


async def resolve_checked_async(host: str, port: int) -> list[tuple]:
    """resolve_checked without blocking the event loop (the resolver runs in the loop's executor)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise EndpointRefused(f"the endpoint host {host!r} does not resolve") from None
    return _checked(host, infos)


def _checked(host: str, infos: list[tuple]) -> list[tuple]:
    if not settings.ALLOW_PRIVATE_ENDPOINTS:
        for info in infos:
            problem = address_problem(info[4][0])
            if problem:
                raise EndpointRefused(
                    f"the endpoint host {host!r} resolves to {problem}; this site only connects to public addresses"
                )
    return infos


RESOLVE_DEADLINE_S = 5.0  # a saved endpoint's host must resolve within this


def check_endpoint(url: str) -> None:
    """Validate an endpoint URL when it is saved (its host resolved within RESOLVE_DEADLINE_S).
    Call it outside a transaction: the lookup waits on the resolver."""
    host, port = check_url_shape(url)
    before_waiting_outside()
    try:
        with deadline(RESOLVE_DEADLINE_S):
            resolve_checked(host, port)
    except httpcore2.ConnectTimeout:
        raise EndpointRefused(
            f"the endpoint host {host!r} did not resolve within {RESOLVE_DEADLINE_S:g} seconds; check the host name"
        ) from None


class _DeadlineStream(NetworkStream):
    """A connection whose every wait is cut to what is left of the thread's ``deadline``."""

    def __init__(self, stream: NetworkStream):
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> NetworkStream:
        tls = self.stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout))
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str):
        return self.stream.get_extra_info(info)


class _GuardedBackend(SyncBackend):
    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        infos = resolve_checked(host, port)
        last_error: Exception | None = None
        for family, type_, proto, _, sockaddr in infos:
            try:
                # Connect to the checked address itself; TLS still verifies ``host``.
                stream = super().connect_tcp(
                    sockaddr[0], sockaddr[1], _left(timeout, httpcore2.ConnectTimeout), local_address, socket_options
                )
                return _DeadlineStream(stream)
            except httpcore2.ConnectError as exc:
                last_error = exc
        raise last_error or httpcore2.ConnectError(f"could not connect to {host}")


SYNC_CONNECTIONS_MAX = 1000  # model calls one process's threads may have open at once (each holds one)


# What one answer of an endpoint may send: a reply streamed token by token with its usage is ~1 MB at
# the longest a turn keeps (stories.models.ACTION_TEXT_MAX characters), a large provider's model list
# ~2 MB. An endpoint is the player's to choose: past this, nothing more is read and the call fails.
ANSWER_MAX_BYTES = 8 * 1024 * 1024


class AnswerTooLarge(ValueError):
    """An endpoint's answer past ANSWER_MAX_BYTES, or compressed (read as sent, it could be any size)."""


def _compressed(response: httpx2.Response) -> AnswerTooLarge | None:
    """Asked for identity: a compressed answer could inflate to any size, and is not read."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    return AnswerTooLarge(f"the model endpoint sent a compressed answer ({encoding[:30]}), which is not read")


def _too_large() -> AnswerTooLarge:
    return AnswerTooLarge(
        f"the model endpoint's answer was larger than {ANSWER_MAX_BYTES // 2**20} MB; nothing past that was read"
    )


class _BoundedStream(httpx2.SyncByteStream):
    def __init__(self, stream):
        self.stream = stream

    def __iter__(self):
        seen = 0
        for chunk in self.stream:
            seen += len(chunk)
            if seen > ANSWER_MAX_BYTES:
                raise _too_large()
            yield chunk

    def close(self):
        self.stream.close()


def _lean_body(stream):
    """The connection and request whose body ``stream`` (httpx's over httpcore's pool) reads, when
    it is a LeanHTTP11Connection's; else None."""
    pooled = getattr(stream, "_httpcore_stream", None)
    inner = getattr(pooled, "_stream", None)
    connection = getattr(inner, "_connection", None)
    if isinstance(connection, http11.LeanHTTP11Connection) and connection._framing is not None:
        return connection, inner._request
    return None


class _BoundedAsyncStream(httpx2.AsyncByteStream):
    """The answer's body, bounded (ANSWER_MAX_BYTES). From a lean connection its reads are taken
    straight from the connection (their errors mapped as httpx maps them, and on any end but the
    last chunk the response is closed as httpcore closes it): a streamed reply's ~60 reads each went
    through four more generators on the way (httpx's transport, httpcore's pool and connection),
    ~3% of a web process's CPU (py-spy, bench/evening.py)."""

    def __init__(self, stream):
        self.stream = stream

    async def __aiter__(self):
        seen = 0
        lean = _lean_body(self.stream)
        if lean is None:
            async for chunk in self.stream:
                seen += len(chunk)
                if seen > ANSWER_MAX_BYTES:
                    raise _too_large()
                yield chunk
            return
        connection, request = lean
        try:
            with map_httpcore_exceptions():
                async with contextlib.aclosing(connection._receive_response_body(request)) as body:
                    async for chunk in body:
                        seen += len(chunk)
                        if seen > ANSWER_MAX_BYTES:
                            raise _too_large()
                        yield chunk
        except BaseException:
            with AsyncShieldCancellation():  # as httpcore's own stream does
                await self.stream.aclose()
            raise

    async def aclose(self):
        await self.stream.aclose()


class GuardedTransport(httpx2.HTTPTransport):
    def __init__(self, **kwargs):
        super().__init__(trust_env=False, **kwargs)
        self._pool = httpcore2.ConnectionPool(
            ssl_context=self._pool._ssl_context,
            network_backend=_GuardedBackend(),
            max_connections=SYNC_CONNECTIONS_MAX,
            max_keepalive_connections=20,
        )

    def handle_request(self, request):
        response = super().handle_request(request)
        response.stream = _BoundedStream(response.stream)
        refused = _compressed(response)
        if refused is not None:
            response.close()  # its connection goes back unread (closed), not held by an answer nobody reads
            raise refused
        return response


class _GuardedAsyncBackend(AsyncNetworkBackend):
    """Connections as plain asyncio transports (stories.providers.netstream), to checked addresses only."""

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        infos = await resolve_checked_async(host, port)
        last_error: Exception | None = None
        for family, type_, proto, _, sockaddr in infos:
            try:
                return await netstream.connect_tcp(sockaddr[0], sockaddr[1], timeout, local_address, socket_options)
            except httpcore2.ConnectError as exc:
                last_error = exc
        raise last_error or httpcore2.ConnectError(f"could not connect to {host}")

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore2.ConnectError("model endpoints are reached over TCP")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process (loading the CA store costs ~15 ms of CPU; a
    client is built per event loop, and Django's test client runs one loop per request)."""
    return httpx2.create_ssl_context()


class GuardedAsyncTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, **kwargs):
        super().__init__(trust_env=False, verify=_tls(), **kwargs)
        # Turns in flight each hold one connection while their model writes.
        self._pool = http11.LeanPool(  # a response's body framed and read without h11's events
            ssl_context=self._pool._ssl_context,
            network_backend=_GuardedAsyncBackend(),
            max_connections=ASYNC_CONNECTIONS_MAX,
            max_keepalive_connections=100,
        )

    async def handle_async_request(self, request):
        response = await super().handle_async_request(request)
        response.stream = _BoundedAsyncStream(response.stream)
        refused = _compressed(response)
        if refused is not None:
            await response.aclose()  # its connection goes back unread (closed), not held by an answer nobody reads
            raise refused
        return response


ASYNC_CONNECTIONS_MAX = 4000  # model calls one web process may have open at once
_async_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def async_http_client(*, connect: float, read: float) -> httpx2.AsyncClient:
    """The running event loop's HTTP client for model endpoints (a client's
    connections belong to one loop): guarded connects, no redirects, no env proxies."""
    loop = asyncio.get_running_loop()
    clients = _async_clients.setdefault(loop, {})
    if (connect, read) not in clients:
        timeout = httpx2.Timeout(connect=connect, read=read, write=30.0, pool=connect)
        clients[(connect, read)] = httpx2.AsyncClient(
            transport=GuardedAsyncTransport(),
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
            headers={"Accept-Encoding": "identity"},
        )
    return clients[(connect, read)]


@functools.lru_cache(maxsize=8)
def http_client(*, connect: float, read: float) -> httpx2.Client:
    """The process's HTTP client for model endpoints: guarded connects, no
    redirects, no env proxies. Shared for its connection pool (building one
    costs ~20 ms of CPU, measured here); it holds no user data, and every new
    connection is checked again."""
    timeout = httpx2.Timeout(connect=connect, read=read, write=30.0, pool=connect)
    return httpx2.Client(
        transport=GuardedTransport(),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"Accept-Encoding": "identity"},
    )
