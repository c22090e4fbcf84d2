"""A fake OpenAI-compatible model for load benches, on one asyncio loop, so a
single process holds thousands of streams: `/v1/chat/completions` streams
WORDS words (the first after --first-token seconds, the rest spread over
--model-seconds) or answers whole after --model-seconds; `/v1/embeddings`
answers bag-of-words vectors. Connections are kept between requests and a
stream is sent chunked, as hosted providers do (a site that reuses its
connections then pays no connect a turn). Prints its port on the first line, then serves
until stdin closes. Counts (streams at once, the most at once, requests) are
printed as JSON on SIGUSR1 and at exit.

    python bench/_stream_model.py --model-seconds 10 --first-token 0.5 [--whole-seconds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import signal
import sys
import time

WORDS = 60  # pieces in a streamed reply (as bench/concurrency.py)
REPLY = " ".join(f"word{n}" for n in range(WORDS))
STATS = {"streams": 0, "streams_max": 0, "chat": 0, "embeddings": 0, "cut": 0, "connections": 0}


def _vector(text: str, dims: int = 384) -> list[float]:
    vec = [0.0] * dims
    for word in re.findall(r"[a-z0-9']+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        vec[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [round(v / norm, 6) for v in vec]


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    raw = await reader.readexactly(length) if length else b"{}"
    try:
        return path, json.loads(raw)
    except ValueError:
        return path, {}


def _whole(status: int, payload: dict) -> bytes:
    data = json.dumps(payload).encode()
    return (
        f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve(reader, writer, args) -> None:
    STATS["connections"] += 1
    try:
        while True:  # requests on this connection until the client closes it
            try:
                path, body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            await _answer(path, body, writer, args)
    except (ConnectionError, asyncio.IncompleteReadError):
        STATS["cut"] += 1
    finally:
        writer.close()


def _whole_reply(body: dict) -> str:
    """A whole answer in the shape a model gives the asking prompt: the cast's memories of a block as
    the JSON the site reads (every character of a story played together is in its scene: each
    remembers the block's last two sentences), anything else a short sentence. A garbled cast answer
    sent the site to its offline reading of every block (measured: ~3x the pass's CPU a turn)."""
    messages = body.get("messages") or [{}]
    system, user = messages[0].get("content") or "", messages[-1].get("content") or ""
    if system.startswith("You keep the memories of each character") and "The cast: " in user:
        cast = [n.strip() for n in user.split("The cast: ", 1)[1].split("\n", 1)[0].split(",") if n.strip()]
        sentences = re.findall(r"^(\d+)\. (.*)$", user.split("The passage:\n", 1)[-1], re.M)
        scene = [{"sentence": int(n), "present": cast} for n, _ in sentences]
        told = " ".join(s for _, s in sentences[-2:])
        memories = [{"character": c, "kind": "witnessed", "importance": 0.6, "text": told} for c in cast if told]
        return "```json\n" + json.dumps({"scene": scene, "memories": memories}) + "\n```"
    return "The crowd murmurs, then moves on."


async def _answer(path: str, body: dict, writer, args) -> None:
    if path.endswith("/embeddings"):
        STATS["embeddings"] += 1
        inputs = body.get("input", [])
        inputs = [inputs] if isinstance(inputs, str) else inputs
        writer.write(
            _whole(
                200,
                {
                    "object": "list",
                    "model": body.get("model", "fake-embed"),
                    "data": [
                        {"object": "embedding", "index": i, "embedding": _vector(t)} for i, t in enumerate(inputs)
                    ],
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                },
            )
        )
        await writer.drain()
        return
    STATS["chat"] += 1
    prompt = sum(len((m.get("content") or "").split()) for m in body.get("messages", []))
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
    }
    if not body.get("stream"):
        await asyncio.sleep(args.whole_seconds)
        content = _whole_reply(body)
        writer.write(
            _whole(
                200,
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": len(content.split()),
                        "total_tokens": prompt + len(content.split()),
                    },
                },
            )
        )
        await writer.drain()
        return
    STATS["streams"] += 1
    STATS["streams_max"] = max(STATS["streams_max"], STATS["streams"])
    try:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        gap = max(0.0, (args.model_seconds - args.first_token) / (WORDS - 1))
        pieces = REPLY.split(" ")
        for i, word in enumerate(pieces):
            await asyncio.sleep(args.first_token if i == 0 else gap)
            delta = {"role": "assistant", "content": word} if i == 0 else {"content": " " + word}
            writer.write(
                _chunk(
                    b"data: "
                    + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode()
                    + b"\n\n"
                )
            )
            await writer.drain()
        writer.write(
            _chunk(
                b"data: "
                + json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).encode()
                + b"\n\n"
            )
        )
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": prompt, "completion_tokens": WORDS, "total_tokens": prompt + WORDS}
            writer.write(_chunk(b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n"))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
    finally:
        STATS["streams"] -= 1


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-seconds", type=float, default=10.0)
    parser.add_argument("--first-token", type=float, default=0.5)
    parser.add_argument("--whole-seconds", type=float, default=1.0, help="a reply not streamed (memory work)")
    args = parser.parse_args()
    server = await asyncio.start_server(lambda r, w: _serve(r, w, args), "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, lambda: print(json.dumps(STATS), flush=True))
    await loop.run_in_executor(None, sys.stdin.read)  # the bench closes stdin to stop this server
    try:
        print(json.dumps(STATS), flush=True)
    except BrokenPipeError:  # the bench is gone: nobody to tell
        pass
    server.close()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
