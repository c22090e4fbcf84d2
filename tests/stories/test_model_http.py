"""A model endpoint's answers as the site reads them (stories.providers.http11): every framing a
server may use gives the body exactly, a connection is used again exactly when HTTP/1.1 allows
it, and a malformed or over-long frame is an error, never a hang or a body made up."""

import asyncio

import httpcore2
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stories.providers import Connection, netguard
from stories.providers.awaited import ModelCall
from stories.providers.http11 import LINE_MAX, TRAILERS_MAX, ChunkedBody
from tests.support.examples import examples

pytestmark = pytest.mark.django_db


def _chunked(chunks: list[bytes], *, extensions: list[bytes], trailers: list[bytes]) -> bytes:
    wire = b""
    for i, chunk in enumerate(chunks):
        ext = extensions[i % len(extensions)] if extensions else b""
        wire += b"%x%s\r\n%s\r\n" % (len(chunk), ext, chunk)
    return wire + b"0\r\n" + b"".join(t + b"\r\n" for t in trailers) + b"\r\n"


def _split(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(wire) + 1) for c in cuts} | {0, len(wire)})
    return [wire[a:b] for a, b in zip(points, points[1:], strict=False)]


@settings(max_examples=examples(300), deadline=None)
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=300), max_size=12),
    extensions=st.lists(st.sampled_from([b"", b";a=b", b' ;name="quoted"', b";x"]), max_size=3),
    trailers=st.lists(st.sampled_from([b"X-Usage: 12", b"Server-Timing: total;dur=3"]), max_size=2),
    after=st.sampled_from([b"", b"HTTP/1.1 200 OK\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
)
def test_a_chunked_body_split_into_any_reads_is_read_exactly_and_ends_at_its_last_chunk(
    chunks, extensions, trailers, after, cuts
):
    wire = _chunked(chunks, extensions=extensions, trailers=trailers)
    body, read = ChunkedBody(), b""
    for part in _split(wire + after, cuts):
        read += body.feed(part)
    assert read == b"".join(chunks)
    assert body.done
    assert body.rest == after  # what came after the message: the connection is not used again


@pytest.mark.parametrize(
    "wire",
    [
        b"zz\r\nabc\r\n",  # not a hex size
        b"0x3\r\nabc\r\n",  # Python's int() would take it
        b"+3\r\nabc\r\n",
        b"3\r\nabcdef\r\n",  # more data than the size says
        b"3" * (LINE_MAX + 10),  # a size line that never ends
        b"0\r\n" + b"X-T: " + b"a" * (TRAILERS_MAX + 10),  # trailers that never end
        b"0\r\n" + b"X-T: a\r\n" * (TRAILERS_MAX // 8 + 10) + b"\r\n",
    ],
)
def test_a_malformed_or_endless_chunk_frame_is_an_error_not_a_body(wire):
    body = ChunkedBody()
    with pytest.raises(httpcore2.RemoteProtocolError):
        for i in range(0, len(wire), 700):
            body.feed(wire[i : i + 700])


class RawServer:
    """An HTTP/1.1 server on loopback answering each request with the next of ``answers``
    (the bytes sent as they are; ``hang``: keep the connection open after them until the client
    leaves; ``close``: close it after them); it counts the connections it was given."""

    def __init__(self, answers: list[tuple[bytes, str]]):
        self.answers, self.connections, self.requests = list(answers), 0, []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = [
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                ]
                body = await reader.readexactly(length[0]) if length else b""
                self.requests.append((head.split(b" ")[0], body))
                wire, after = self.answers.pop(0)
                writer.write(wire)
                await writer.drain()
                if after == "hang":
                    await reader.read()  # until the client closes its side
                    return
                if after == "close":
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


def _run(coro):
    return asyncio.run(coro)


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"


@pytest.mark.parametrize(
    "answer, after, connections",
    [
        (CHUNKED, "keep", 1),
        (LENGTH, "keep", 1),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "keep", 1),
        (b"HTTP/1.1 204 No Content\r\n\r\n", "keep", 1),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world", "close", 2),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 11\r\n\r\nhello world", "close", 2),
        (b"HTTP/1.1 200 OK\r\n\r\nhello world", "close", 2),  # the body ends when the server closes
        (LENGTH + b"HTTP/1.1 200 OK\r\n", "close", 2),  # bytes after the body: the next answer is not trusted
        (CHUNKED[:-2] + b"X-Usage: 3\r\n\r\n", "keep", 1),  # a trailer field
    ],
)
def test_every_framing_gives_its_body_and_a_connection_serves_again_exactly_when_http_allows(
    settings, answer, after, connections
):
    settings.ALLOW_PRIVATE_ENDPOINTS = True
    expected = b"" if b" 204 " in answer or b"Length: 0" in answer else b"hello world"

    async def two_requests():
        async with RawServer([(answer, after), (answer, after)]) as server:
            client = netguard.async_http_client(connect=5, read=5)
            bodies = []
            for _ in range(2):
                response = await client.post(server.url + "/v1/x", content=b"{}")
                bodies.append(response.content)
            await client.aclose()
            return bodies, server.connections

    bodies, used = _run(two_requests())
    assert bodies == [expected, expected]
    assert used == connections


def test_an_answer_left_midway_closes_its_connection_and_the_next_request_gets_a_new_one(settings):
    settings.ALLOW_PRIVATE_ENDPOINTS = True
    first = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"  # and nothing more

    async def stopped_then_again():
        async with RawServer([(first, "hang"), (CHUNKED, "keep")]) as server:
            client = netguard.async_http_client(connect=5, read=5)
            async with client.stream("POST", server.url + "/v1/x", content=b"{}") as response:
                async for piece in response.aiter_bytes():
                    assert piece == b"hello"
                    break  # the player pressed Stop
            again = await client.post(server.url + "/v1/x", content=b"{}")
            await client.aclose()
            return again.content, server.connections

    body, used = _run(stopped_then_again())
    assert body == b"hello world"
    assert used == 2  # the stopped answer's connection was never handed to the next request


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n wo",
        b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nhello world",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\nhello\r\n0\r\n\r\n",
    ],
)
def test_a_body_cut_short_or_malformed_is_an_error_not_a_shorter_answer(settings, answer):
    settings.ALLOW_PRIVATE_ENDPOINTS = True

    async def cut():
        async with RawServer([(answer, "close")]) as server:
            client = netguard.async_http_client(connect=5, read=5)
            try:
                await client.post(server.url + "/v1/x", content=b"{}")
            finally:
                await client.aclose()

    with pytest.raises(httpx2.RemoteProtocolError):
        _run(cut())


def _sse_chunked(words: list[str]) -> bytes:
    events = [
        b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "%s"}}]}\n\n' % w.encode() for w in words
    ]
    events.append(b'data: {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n')
    events.append(b"data: [DONE]\n\n")
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(
        events, extensions=[], trailers=[]
    )


def _streamed_call(url: str) -> ModelCall:
    """A turn's streamed model call to the test server at ``url``."""
    return ModelCall(
        conn=Connection(url + "/v1", "sk-test", "m"),
        messages=[{"role": "user", "content": "go"}],
        max_tokens=50,
        temperature=0.7,
        stream=True,
    )


def test_streamed_replies_from_a_chunked_keep_alive_endpoint_arrive_whole_on_one_connection(settings):
    """As OpenAI, OpenRouter or vLLM stream: chunked, the connection kept for the next turn."""
    settings.ALLOW_PRIVATE_ENDPOINTS = True
    words = ["The ", "lantern ", "gutters."]

    async def two_turns():
        async with RawServer([(_sse_chunked(words), "keep"), (_sse_chunked(words[::-1]), "keep")]) as server:
            texts = []
            for _ in range(2):
                call = _streamed_call(server.url)
                texts.append("".join([piece async for piece in call.deltas()]))
            return texts, server.connections

    texts, used = _run(two_turns())
    assert texts == ["The lantern gutters.", "gutters.lantern The "]
    assert used == 1


def test_the_pool_counts_the_connections_serving_a_reply_and_reuses_one_freed(settings):
    """A pool of two connections with two answers being read: a third request waits for one of them
    (it opens no third) and is answered on it once it is free (the pool's pass skips the serving
    connections' checks, not their place in its bound)."""
    from stories.providers import netguard as guard

    settings.ALLOW_PRIVATE_ENDPOINTS = True

    async def three_on_two():
        async with RawServer([(CHUNKED, "keep")] * 4) as server:
            client = guard.async_http_client(connect=5, read=5)
            pool = client._transport._pool
            pool._max_connections = 2
            async with client.stream("POST", server.url + "/v1/x", content=b"{}") as first:
                async with client.stream("POST", server.url + "/v1/x", content=b"{}") as second:
                    third = asyncio.create_task(client.post(server.url + "/v1/x", content=b"{}"))
                    deadline = asyncio.get_running_loop().time() + 10
                    while len(pool._requests) < 3:  # the third is in the pool's queue
                        assert asyncio.get_running_loop().time() < deadline, "the third request never queued"
                        await asyncio.sleep(0)
                    assert not third.done()
                    assert await first.aread() == b"hello world"
                    await first.aclose()
                    answered = await third
                    assert await second.aread() == b"hello world"
            again = await client.post(server.url + "/v1/x", content=b"{}")
            await client.aclose()
            return answered.content, again.content, server.connections

    third, again, used = _run(three_on_two())
    assert third == again == b"hello world"
    assert used == 2


async def _drip_server(gaps: list[float]):
    """A server answering one chunked reply whose pieces come ``gaps`` seconds apart (a model that
    writes slowly); after the last gap it ends the body."""

    async def serve(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)  # the request's body: b"{}"
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for gap in gaps:
                await asyncio.sleep(gap)
                writer.write(b"1\r\nx\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize(
    "gaps, read, pieces, timed_out",
    [
        ([0.1] * 8, 0.4, 8, False),  # 0.8 s in all, never 0.4 s without a piece: the deadline moves with each
        ([0.05, 0.05, 5.0], 0.4, 2, True),  # the model stops writing: the read ends 0.4 s after the last piece
        ([0.1, 0.6], 0.4, 1, True),  # a gap past the bound after a piece that came early
    ],
)
def test_a_streamed_answer_times_out_only_when_no_piece_comes_for_the_read_timeout(
    settings, gaps, read, pieces, timed_out
):
    settings.ALLOW_PRIVATE_ENDPOINTS = True

    async def read_all():
        server, url = await _drip_server(gaps)
        client = netguard.async_http_client(connect=5, read=read)
        got, error, loop = [], None, asyncio.get_running_loop()
        started = last = loop.time()
        try:
            async with client.stream("POST", url + "/v1/x", content=b"{}") as response:
                async for piece in response.aiter_bytes():
                    got.append(piece)
                    last = loop.time()
        except httpx2.ReadTimeout as exc:
            error = exc
        ended = loop.time()
        await client.aclose()
        server.close()
        return got, error, ended - last, ended - started

    got, error, after_last, took = _run(read_all())
    assert b"".join(got) == b"x" * pieces
    assert (error is not None) == timed_out
    if timed_out:  # told when the bound passed with no piece: not before it, and not much after
        assert read - 0.05 <= after_last < read + 2.0, after_last
    assert took < sum(gaps[:pieces]) + read + 3.0


def test_a_shorter_read_timeout_on_a_kept_connection_is_kept_to(settings):
    """A call a request waits on has a shorter bound than the background's: on a connection kept
    from a call with a longer one, its reads still end at its own bound."""
    settings.ALLOW_PRIVATE_ENDPOINTS = True
    stalled = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"  # then nothing

    async def long_then_short():
        async with RawServer([(CHUNKED, "keep"), (stalled, "hang")]) as server:
            client = netguard.async_http_client(connect=5, read=30)
            assert (await client.post(server.url + "/v1/x", content=b"{}")).content == b"hello world"
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(httpx2.ReadTimeout):
                await client.post(server.url + "/v1/x", content=b"{}", timeout=httpx2.Timeout(5, read=0.4))
            took = loop.time() - started
            await client.aclose()
            return took, server.connections

    took, used = _run(long_then_short())
    assert used == 1  # the second call came on the kept connection
    assert 0.35 <= took < 5, took


def test_a_kept_connection_the_server_closed_while_idle_is_not_handed_to_the_next_request(settings):
    """Servers drop idle connections (their keep-alive ran out, a restart): the next request goes on a
    new connection and gets its answer, never the closed one's error."""
    settings.ALLOW_PRIVATE_ENDPOINTS = True

    async def closed_while_idle():
        async with RawServer([(CHUNKED, "close"), (CHUNKED, "keep")]) as server:
            client = netguard.async_http_client(connect=5, read=5)
            assert (await client.post(server.url + "/v1/x", content=b"{}")).content == b"hello world"
            pool, loop = client._transport._pool, asyncio.get_running_loop()
            deadline = loop.time() + 10
            while not all(c.has_expired() for c in pool.connections):  # the server's close has reached us
                assert loop.time() < deadline, "the server's close never reached the client"
                await asyncio.sleep(0.01)
            again = await client.post(server.url + "/v1/x", content=b"{}")
            await client.aclose()
            return again.content, server.connections

    body, used = _run(closed_while_idle())
    assert body == b"hello world"
    assert used == 2


@pytest.mark.parametrize(
    "event",
    [
        b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "caf\xe9"}}]}\n\n',  # Latin-1, not UTF-8
        b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "cut\n\n',  # JSON cut short
    ],
)
def test_a_stream_event_that_is_not_utf8_json_is_a_bad_response_after_the_text_before_it(settings, event):
    """Server-sent events are UTF-8 JSON here: anything else is the endpoint's fault, said as such
    (never a 500), and what the reply keeps is exactly what was shown of it."""
    from stories.providers import ProviderError

    settings.ALLOW_PRIVATE_ENDPOINTS = True
    good = b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "Caf\xc3\xa9 "}}]}\n\n'
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire += _chunked([good, event, b"data: [DONE]\n\n"], extensions=[], trailers=[])

    async def read():
        async with RawServer([(wire, "keep")]) as server:
            call = _streamed_call(server.url)
            got = []
            with pytest.raises(ProviderError) as raised:
                async for piece in call.deltas():
                    got.append(piece)
            return "".join(got), call.text, raised.value

    shown, kept, error = _run(read())
    assert error.code == "bad_response", error.code
    assert shown == kept and shown in ("", "Café ")


def test_calls_on_one_endpoint_each_carry_their_own_key_and_a_new_key_is_used_at_once(fake_llm, settings):
    """The SDK's clients are kept for the next call to the same endpoint with the same key (building
    one a call cost CPU): a kept client must never carry one account's key on another's call, a key
    changed in the settings is sent on the very next call, and a call a request waits on is still tried
    once while a background one keeps its retries. Awaited (a web process's loop) and in threads (a
    worker's pass)."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    from stories import providers
    from tests.support.fake_llm import Reply

    settings.ALLOW_PRIVATE_ENDPOINTS = True
    keys = ["sk-first-0001", "sk-second-0002", "sk-first-0001", "sk-third-0003", "sk-second-0002"]
    go = [{"role": "user", "content": "go"}]

    async def awaited():
        for key in keys:
            conn = Connection(fake_llm.url, key, "m")
            call = ModelCall(conn=conn, messages=go, max_tokens=20, temperature=0.7, stream=True)
            assert "".join([piece async for piece in call.deltas()])

    _run(awaited())
    assert [r.headers["authorization"] for r in fake_llm.chat_requests()] == [f"Bearer {key}" for key in keys]

    def threaded(conn):
        return providers.client(conn).chat.completions.create(model="m", messages=go, max_tokens=5)

    before = len(fake_llm.chat_requests())
    with ThreadPoolExecutor(4) as pool:  # a worker's threads share the kept clients
        list(pool.map(threaded, [Connection(fake_llm.url, key, "m") for key in keys * 4]))
    sent = sorted(r.headers["authorization"] for r in fake_llm.chat_requests()[before:])
    assert sent == sorted(f"Bearer {key}" for key in keys * 4)

    for conn, tries in (
        (providers.for_request(Connection(fake_llm.url, keys[0], "m")), 1),
        (Connection(fake_llm.url, keys[0], "m"), 3),
    ):  # a request's call; the background's
        fake_llm.script.clear()
        fake_llm.queue(*[Reply(status=500)] * 3)
        before = len(fake_llm.chat_requests())
        with pytest.raises(openai.InternalServerError):
            threaded(conn)
        assert len(fake_llm.chat_requests()) - before == tries
