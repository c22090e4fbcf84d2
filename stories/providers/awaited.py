"""A turn's model call, awaited on the event loop: streamed (the raw server-sent
events parsed a network read at a time) or not; it holds no thread and touches no
database, and is recorded by its caller in its next database step."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from stories.providers import (
    FAILURES,
    Completion,
    Connection,
    ProviderError,
    answers,
    cached_tokens,
    client,
    failed,
    record_call,
    scrub,
)


def _stream_error(error, conn: Connection) -> ProviderError:
    """An error event in the middle of a stream."""
    message = error.get("message") if isinstance(error, dict) else str(error)
    detail = scrub(str(message or ""), conn)
    return ProviderError("endpoint_error", f"the model endpoint failed while writing: {detail}".rstrip(": "))


class _EventStream:
    """Server-sent events from raw bytes: ``feed`` returns the data of every
    event completed so far (an event's data lines joined by newlines)."""

    def __init__(self):
        self.pending = b""
        self.data: list[bytes] = []

    def feed(self, raw: bytes) -> list[bytes]:
        buffer = self.pending + raw
        if b"\r" in buffer:
            tail = buffer.endswith(b"\r")  # its \n may come in the next read
            buffer = buffer.replace(b"\r\n", b"\n")
            buffer = buffer[:-1].replace(b"\r", b"\n") + b"\r" if tail else buffer.replace(b"\r", b"\n")
        *lines, self.pending = buffer.split(b"\n")
        out = []
        for line in lines:
            if not line:
                if self.data:
                    out.append(b"\n".join(self.data))
                    self.data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self.data.append(value[1:] if value.startswith(b" ") else value)
        return out


async def _event_data(http_response) -> AsyncIterator[list[bytes]]:
    """The data of the events each network read completed; at the end, an event the server left
    unterminated. The body as the transport reads it: an answer is never compressed (the transport
    refuses one, stories.providers.netguard), so httpx's decoding layers, ~60 generator steps a
    reply, have nothing to do."""
    events = _EventStream()
    async for raw in http_response.stream:
        yield events.feed(raw)
    yield events.feed(b"\n\n")


class ModelCall:
    """One chat completion awaited on the event loop: a turn's model call. It
    holds no thread and touches no database; the caller records it
    (``record``) in its next database step. ``deltas()`` yields the text as the
    model writes it (all at once unless ``stream``); afterwards ``completion``
    is set, or ProviderError was raised and ``error`` is set. ``text`` is what
    arrived so far, which is what a stopped reply keeps."""

    def __init__(
        self,
        *,
        conn: Connection,
        messages: list[dict],
        max_tokens: int,
        temperature: float,
        reasoning_max_tokens: int = 0,
        stream: bool = False,
        sampling: dict | None = None,
        text_max: int | None = None,
    ):
        self.conn = conn
        self.text_max = text_max  # the reply ends there (finish "length"): what is shown is what can be kept
        # Everything but the model goes in as extra_body, which the SDK sends as it is: passed as its
        # own arguments the SDK walks each against its declared types to transform it (~10 ms of CPU for
        # a full context's ``messages``; the sampling and stream options were 1.7% of a web process).
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, **(sampling or {})}
        if reasoning_max_tokens:
            body["reasoning"] = {"max_tokens": reasoning_max_tokens}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        self.request = {"model": conn.model, "messages": [], "extra_body": body}
        self.stream = stream
        self.text = ""
        self.completion: Completion | None = None
        self.error: ProviderError | None = None
        self.started = time.monotonic()

    async def deltas(self) -> AsyncIterator[str]:
        conn = self.conn
        self.started = time.monotonic()
        if not conn.endpoint_url or not conn.model:
            self.error = ProviderError(
                "not_configured", "no model is set up: add an endpoint URL and model in your settings"
            )
            raise self.error
        model, usage, finish = conn.model, None, None
        try:
            sdk = client(conn, awaited=True)
            if self.stream:
                # The raw event stream, parsed here a network read at a time: the SDK's typed chunks
                # and line iterators cost ~0.5 ms of CPU a piece, and everything that arrived in one
                # read goes on as one piece (a fast model sends several per read).
                async with sdk.chat.completions.with_streaming_response.create(**self.request) as response:
                    done = False
                    async for datas in _event_data(response.http_response):
                        pieces = []
                        for data in datas:
                            if data == b"[DONE]":
                                done = True
                                break
                            # decoded first: server-sent events are UTF-8 by their standard, and
                            # json.loads of bytes guesses the encoding of each (py-spy: 0.6% of a web process)
                            chunk = json.loads(data.decode("utf-8", "surrogatepass"))
                            if chunk.get("error"):
                                if pieces:  # text that came in the same network read as the error is kept
                                    self.text += "".join(pieces)
                                    yield "".join(pieces)
                                raise _stream_error(chunk["error"], conn)
                            model = chunk.get("model") or model
                            usage = chunk.get("usage") or usage
                            choices = chunk.get("choices") or []
                            if not choices:
                                continue
                            finish = choices[0].get("finish_reason") or finish
                            piece = (choices[0].get("delta") or {}).get("content") or ""
                            if piece:
                                pieces.append(piece)
                        if pieces:
                            piece = "".join(pieces)
                            if self.text_max is not None and len(self.text) + len(piece) >= self.text_max:
                                piece, done, finish = piece[: self.text_max - len(self.text)], True, "length"
                            self.text += piece
                            if piece:
                                yield piece
                        if done:
                            break
            else:
                body = {"model": self.request["model"], **self.request["extra_body"]}
                text, named, usage, finish = answers.chat_answer(
                    await sdk.post("/chat/completions", body=body, cast_to=object)  # as sent: answers.py
                )
                model = named or model
                self.text = text[: self.text_max]
                if self.text:
                    yield self.text
        except ProviderError as exc:
            self.error = exc
            raise
        except FAILURES as exc:
            self.error = failed(exc, conn)
            raise self.error from None
        cached = cached_tokens(usage)
        self.completion = Completion(
            text=self.text.strip(),
            model=model,
            prompt_tokens=answers.count(usage, "prompt_tokens"),
            completion_tokens=answers.count(usage, "completion_tokens"),
            latency_ms=int((time.monotonic() - self.started) * 1000),
            finish_reason=finish,
            cached_tokens=cached,
        )
        if not self.completion.text:
            self.error = ProviderError("empty", "the model returned no text; try again")
            raise self.error

    def record(
        self, *, user_id: int, purpose: str, adventure_id: int | None, stopped: bool = False, sent: bytes = b""
    ) -> None:
        """Write the call to the user's debug log (a database step); ``sent``: the prompt's
        fingerprint (stories.prompt.prefix)."""
        c = self.completion
        if self.error is not None:
            record_call(
                user_id=user_id,
                adventure_id=adventure_id,
                purpose=purpose,
                conn=self.conn,
                outcome=self.error.code,
                started=self.started,
                sent=sent,
                error=self.error.message,
                prompt=c.prompt_tokens if c else 0,
            )
        elif stopped or c is None:
            record_call(
                user_id=user_id,
                adventure_id=adventure_id,
                purpose=purpose,
                conn=self.conn,
                outcome="stopped",
                started=self.started,
                sent=sent,
                error=f"stopped by the player after {len(self.text)} characters",
            )
        else:
            record_call(
                user_id=user_id,
                adventure_id=adventure_id,
                purpose=purpose,
                conn=self.conn,
                outcome="ok",
                started=self.started,
                sent=sent,
                prompt=c.prompt_tokens,
                completion=c.completion_tokens,
                cached=c.cached_tokens,
            )
