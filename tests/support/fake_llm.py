"""A small OpenAI-compatible HTTP server for tests: the only faked part.

It answers /v1/chat/completions and /v1/embeddings like the real API, records
every request (headers and JSON body), and can be scripted per request with
status codes, delays and bodies. Embeddings are deterministic bag-of-words
vectors, so similar texts get similar vectors.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    status: int = 200
    text: str | None = None  # chat reply text (status 200)
    delay: float = 0.0  # seconds before answering
    body: dict | None = None  # raw JSON body, overrides everything
    headers: dict = field(default_factory=dict)
    when: object = None  # optional predicate on the request body: only such a request takes this reply
    error_after: int | None = None  # streaming: after this many pieces, an OpenAI error event ends the stream
    stall_after: int | None = None  # streaming: after this many pieces the model goes silent for stall_s, then closes
    stall_s: float = 3.0
    # streaming, on the wire: the line ending; ``wire_slice`` writes the whole stream at once in slices
    # of that many bytes (split anywhere, each its own write); ``terminated`` False leaves the last
    # event without its blank line
    newline: str = "\n"
    wire_slice: int | None = None
    terminated: bool = True


@dataclass
class Recorded:
    path: str
    headers: dict
    body: dict
    at: float


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def _shared(a: list[str], b: list[str]) -> int:
    """How many first items ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def bag_of_words_vector(text: str, dims: int) -> list[float]:
    vec = [0.0] * dims
    for word in _words(text):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        vec[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class FakeLLM:
    def __init__(self, *, embedding_dims: int = 384, reply=None, tls=None):
        self.embedding_dims = embedding_dims
        self.tls = tls  # an ssl.SSLContext: the fake answers https
        self.script: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.counter = 0
        self.latency = 0.0  # seconds before each unscripted answer
        # Streaming (a request with "stream": true): seconds before the first chunk and between the
        # next ones (one word a chunk); calls streaming now, the most at once, and streams the client cut.
        self.first_token_delay = 0.0
        self.stream_delay = 0.0
        self.streaming = 0
        self.streaming_max = 0
        self.streams_cut = 0
        self.in_flight = 0  # chat calls being answered now (streamed or not)
        self.in_flight_max = 0
        # a prefix cache as model servers keep one: the words of the last 8 chat prompts; each answer's
        # usage says how many of its prompt's first words one of them shares (prompt_tokens_details)
        self.cached_prompts: deque[list[str]] = deque(maxlen=8)
        self.reply = reply or (lambda body, n: f"The story goes on, and something new happens (reply {n}).")
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms delayed-ACK stall)

            def log_message(self, *args):
                pass

            def do_GET(self):
                server._record(self, {})
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                server._record(self, body)
                if self.path.endswith("/chat/completions"):
                    return server._chat(self, body)
                if self.path.endswith("/embeddings"):
                    return server._embeddings(self, body)
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        # A deep listen backlog: a bench connects a thousand players' model calls at once.
        self.httpd = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 1024})(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        # a short poll: stop() waits for serve_forever to notice, and every test that talks to a model stops one
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    # ---- control
    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def queue(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- internals
    def _record(self, handler, body):
        with self.lock:
            headers = {k.lower(): v for k, v in handler.headers.items()}
            self.requests.append(Recorded(handler.path, headers, body, time.time()))

    def _next(self, body: dict | None = None) -> Reply | None:
        with self.lock:
            for reply in list(self.script):
                if reply.when is None or (body is not None and self._matches(reply, body)):
                    self.script.remove(reply)
                    return reply
            return None

    @staticmethod
    def _matches(reply: Reply, body: dict) -> bool:
        try:
            return bool(reply.when(body))
        except (KeyError, IndexError, TypeError, AttributeError):
            return False  # a predicate about chat bodies does not match an embeddings request

    def _error_body(self, status):
        messages = {
            401: ("Incorrect API key provided: sk-****. You can find your API key at the provider.", "invalid_api_key"),
            404: ("The model does not exist or you do not have access to it.", "model_not_found"),
            429: ("Rate limit reached for requests.", "rate_limit_exceeded"),
        }
        message, code = messages.get(status, (f"upstream failure {status}", "server_error"))
        return {"error": {"message": message, "type": "invalid_request_error", "code": code}}

    def _chat(self, handler, body):
        with self.lock:
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            return self._chat_answer(handler, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _chat_answer(self, handler, body):
        script = self._next(body) or Reply(delay=self.latency)
        if script.delay:
            time.sleep(script.delay)
        if script.body is not None:
            return handler._send(script.status, script.body, script.headers)
        if script.status != 200:
            return handler._send(script.status, self._error_body(script.status), script.headers)
        with self.lock:
            self.counter += 1
            n = self.counter
        text = script.text if script.text is not None else self.reply(body, n)
        words = [w for m in body.get("messages", []) for w in ["\x1e", *_words(m.get("content") or "")]]
        prompt_words = len(words) - len(body.get("messages", []))
        with self.lock:
            shared = max((_shared(seen, words) for seen in self.cached_prompts), default=0)
            cached = max(shared - sum(1 for w in words[:shared] if w == "\x1e"), 0)
            self.cached_prompts.append(words)
        if body.get("stream"):
            return self._stream(handler, body, n, text, prompt_words, script=script, cached=cached)
        handler._send(
            200,
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake-model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": prompt_words,
                    "completion_tokens": len(_words(text)),
                    "total_tokens": prompt_words + len(_words(text)),
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            },
            script.headers,
        )

    def _stream(self, handler, body, n, text, prompt_words, script, cached=0):
        """Server-sent chunks as OpenAI streams them: the role and first word after
        first_token_delay, one word a chunk every stream_delay seconds, a final chunk
        with the finish reason, usage when stream_options asks, then [DONE]."""
        import re

        pieces = re.findall(r"\S+\s*", text) or [""]
        base = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
        }
        with self.lock:
            self.streaming += 1
            self.streaming_max = max(self.streaming_max, self.streaming)
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.close_connection = True

            error_after, nl, held = script.error_after, script.newline, []

            def send(payload, last=False):
                event = f"data: {payload}{nl}{'' if last and not script.terminated else nl}".encode()
                if script.wire_slice:
                    held.append(event)
                    return
                handler.wfile.write(event)
                handler.wfile.flush()

            for i, piece in enumerate(pieces):
                if not script.wire_slice:
                    time.sleep(self.first_token_delay if i == 0 else self.stream_delay)
                if i == script.stall_after:
                    time.sleep(script.stall_s)
                    return
                if i == error_after:
                    send(json.dumps({"error": {"message": "the model server overloaded", "type": "server_error"}}))
                    return
                delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                send(json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
            send(json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            if (body.get("stream_options") or {}).get("include_usage"):
                send(
                    json.dumps(
                        {
                            **base,
                            "choices": [],
                            "usage": {
                                "prompt_tokens": prompt_words,
                                "completion_tokens": len(_words(text)),
                                "total_tokens": prompt_words + len(_words(text)),
                                "prompt_tokens_details": {"cached_tokens": cached},
                            },
                        }
                    )
                )
            send("[DONE]", last=True)
            if held:  # the whole stream, cut into slices that each go out as their own segment
                handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                wire = b"".join(held)
                for start in range(0, len(wire), script.wire_slice):
                    handler.wfile.write(wire[start : start + script.wire_slice])
                    handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.lock:
                self.streams_cut += 1
        finally:
            with self.lock:
                self.streaming -= 1

    def _embeddings(self, handler, body):
        script = self._next(body) or Reply()
        if script.delay:
            time.sleep(script.delay)
        if script.status != 200:
            return handler._send(script.status, self._error_body(script.status), script.headers)
        if script.body is not None:
            return handler._send(200, script.body, script.headers)
        inputs = body.get("input", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        data = [
            {"object": "embedding", "index": i, "embedding": bag_of_words_vector(t, self.embedding_dims)}
            for i, t in enumerate(inputs)
        ]
        handler._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake-embed"),
                "usage": {"prompt_tokens": sum(len(_words(t)) for t in inputs), "total_tokens": 0},
            },
        )
