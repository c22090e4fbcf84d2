"""The libraries' internals the site still leans on, each pinned by a contract: an upgrade that
changes one fails here, by name, instead of somewhere in a slow test or in production.

- uvicorn's h11 protocol (config.web_protocol subclasses it: ``conn``, ``cycle``, ``transport``,
  ``loop``, ``logger`` and the three transport callbacks);
- asgiref's ThreadSensitiveContext with a caller-owned executor (config.async_db lends threads);
- httpcore's network backends and streams (stories.providers.netguard, netstream: the guarded
  connects, the deadline on every read and write, the pool built with our backend);
- psycopg's ``Connection.wait`` with a timeout and the error it raises (config.db_deadline: a
  frozen database is a 503 within seconds; libpq's own timeouts cannot see a frozen server, the
  kernel answers for it);
- Pillow's PNG chunk reader (stories.library.lorebooks.png_card);
- redis-py's asyncio ``pack_command`` (config.redis_pool.HiredisPacked packs with hiredis instead: the
  same bytes for every command the site sends)."""

import asyncio
import inspect
import io
import struct
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import h11
import httpcore2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def test_uvicorns_h11_protocol_has_what_the_header_deadline_reads():
    from uvicorn.config import Config
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.server import ServerState

    loop = asyncio.new_event_loop()
    try:
        protocol = H11Protocol(Config(app=lambda *a: None, lifespan="off"), ServerState(), {}, _loop=loop)
        assert isinstance(protocol.conn, h11.Connection) and protocol.conn.their_state is h11.IDLE
        assert protocol.loop is loop and protocol.logger is not None
        assert hasattr(protocol, "cycle") and hasattr(protocol, "transport")
        for name in ("connection_made", "data_received", "connection_lost"):
            assert list(inspect.signature(getattr(H11Protocol, name)).parameters)[:2][0] == "self", name
        source = inspect.getsource(H11Protocol)
        assert "self.cycle = RequestResponseCycle(" in source and "response_complete" in source
    finally:
        loop.close()


def test_asgirefs_thread_sensitive_context_runs_calls_on_the_executor_it_is_given():
    from asgiref.sync import ThreadSensitiveContext, sync_to_async

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lent")
    seen = []

    async def main():
        async with ThreadSensitiveContext(executor=executor):
            await sync_to_async(lambda: seen.append(threading.current_thread().name), thread_sensitive=True)()

    asyncio.run(main())
    executor.shutdown()
    assert seen and seen[0].startswith("lent")


def test_httpcore_backends_and_streams_are_the_shapes_netguard_wraps():
    from httpcore2._backends.base import AsyncNetworkBackend, AsyncNetworkStream, NetworkStream
    from httpcore2._backends.sync import SyncBackend

    assert list(inspect.signature(SyncBackend.connect_tcp).parameters) == [
        "self",
        "host",
        "port",
        "timeout",
        "local_address",
        "socket_options",
    ]
    for stream in (NetworkStream, AsyncNetworkStream):
        assert list(inspect.signature(stream.read).parameters) == ["self", "max_bytes", "timeout"]
        assert list(inspect.signature(stream.write).parameters) == ["self", "buffer", "timeout"]
        assert "start_tls" in vars(stream) and "get_extra_info" in vars(stream)
    assert "connect_tcp" in vars(AsyncNetworkBackend) and "sleep" in vars(AsyncNetworkBackend)
    assert {"network_backend", "max_connections"} <= set(inspect.signature(httpcore2.ConnectionPool).parameters)
    from stories.providers.netguard import GuardedAsyncTransport, GuardedTransport

    for transport in (GuardedTransport(), GuardedAsyncTransport()):
        assert transport._pool._network_backend is not None  # the pool built with our backend
    for error in ("ReadTimeout", "WriteTimeout", "ConnectTimeout", "ConnectError"):
        assert issubclass(getattr(httpcore2, error), Exception), error


def test_psycopgs_wait_takes_a_timeout_and_raises_its_wait_timeout():
    import psycopg
    from psycopg import errors

    assert "timeout" in inspect.signature(psycopg.Connection.wait).parameters
    assert issubclass(errors._WaitTimeout, psycopg.OperationalError)


@pytest.mark.django_db
def test_a_deadline_connection_stops_waiting_on_a_server_that_does_not_answer():
    """The deadline itself, on a real connection: a query longer than it is cut off client-side."""
    import psycopg
    from django.db import connection

    from config.db_deadline import DeadlineConnection

    params = dict(connection.get_connection_params())
    params.pop("pool", None)
    with DeadlineConnection.connect(**params, autocommit=True) as conn:
        conn.deadline_s = 0.5
        with pytest.raises(psycopg.OperationalError, match="did not answer within 0.5 seconds"):
            conn.execute("SELECT pg_sleep(5)")


def test_pillows_png_chunk_reader_frames_and_checks_chunks():
    from PIL import PngImagePlugin

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    data = chunk(b"tEXt", b"chara\0abc") + chunk(b"IEND", b"")
    with PngImagePlugin.ChunkStream(io.BytesIO(data)) as chunks:
        kind, at, length = chunks.read()
        assert (kind, at, length) == (b"tEXt", 8, 9)
        chunks.crc(kind, chunks.fp.read(length))  # a good checksum passes
    broken = data[:-13] + b"\0\0\0\0" + data[-12:]
    with PngImagePlugin.ChunkStream(io.BytesIO(broken)) as chunks:
        kind, _, length = chunks.read()
        with pytest.raises(SyntaxError):
            chunks.crc(kind, chunks.fp.read(length))


@settings(max_examples=300, deadline=None)
@given(
    command=st.sampled_from(["XREAD", "ZADD", "SET", "CONFIG GET", b"XADD"]),
    args=st.lists(
        st.one_of(
            st.text(max_size=20),
            st.binary(max_size=20),
            st.integers(min_value=-(2**63), max_value=2**63 - 1),
            st.floats(allow_nan=False, allow_infinity=False),
        ),
        max_size=12,
    ),
)
def test_the_loops_redis_commands_packed_by_hiredis_are_the_bytes_redis_py_packs(command, args):
    """The event loop's and the live hub's Redis connections pack with hiredis; a command packed so is
    byte for byte the one redis-py's own asyncio connection packs (or refused the same way)."""
    import redis
    from redis.asyncio.connection import Connection

    from config.redis_pool import PackedConnection

    def packed(connection):
        try:
            return b"".join(bytes(p) for p in connection.pack_command(command, *args))
        except (redis.DataError, UnicodeEncodeError) as exc:
            return type(exc)

    assert packed(PackedConnection()) == packed(Connection())
