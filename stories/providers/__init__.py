"""The one door to any model: OpenAI-compatible chat and embeddings through the
`openai` SDK with the user's own endpoint and key.

Timeouts (connect 5 s, read 120 s), bounded retries with backoff on 429/5xx
(the SDK's), no redirects, the SSRF guard on every connection. Every call is
recorded in ProviderCall for the user's debug log; keys never reach a log,
an error message or a response.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2
import openai
from django.conf import settings

from config.errors import UpstreamFailed
from stories import limits
from stories.models import ProviderCall
from stories.providers.netguard import EndpointRefused, async_http_client, check_url_shape, http_client

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0  # seconds
READ_TIMEOUT = 120.0  # seconds; overridable for tests via PROVIDER_READ_TIMEOUT
MAX_RETRIES = 2  # extra attempts on 408/409/429/5xx and connection errors


class ProviderError(UpstreamFailed):
    """A model call failed; ``code`` is stable, ``message`` is for the player.
    A 424 (the user's endpoint failed the request), or a 429 when the endpoint
    is rate limiting the key."""

    def __init__(self, code: str, message: str, *, retry_after: int | None = None):
        super().__init__(message, code=code, retry_after=retry_after)
        if code == "rate_limited":
            self.status = 429
            self.retry_after = retry_after or 30


@dataclass(frozen=True)
class Connection:
    """Where and as whom to call. ``demo`` marks the shared demo model."""

    endpoint_url: str
    api_key: str
    model: str
    demo: bool = False

    def __repr__(self) -> str:  # never print the key
        return f"Connection({self.endpoint_url!r}, model={self.model!r}, demo={self.demo})"


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    finish_reason: str | None


def _timeout() -> httpx2.Timeout:
    read = getattr(settings, "PROVIDER_READ_TIMEOUT", READ_TIMEOUT)
    return httpx2.Timeout(connect=CONNECT_TIMEOUT, read=read, write=30.0, pool=CONNECT_TIMEOUT)


def _client(conn: Connection, *, awaited: bool = False) -> openai.OpenAI | openai.AsyncOpenAI:
    """The SDK client for ``conn`` (``awaited``: the async one, for the event loop)."""
    try:
        check_url_shape(conn.endpoint_url)
    except EndpointRefused as exc:
        raise ProviderError("refused", str(exc)) from None
    sdk, transport = (openai.AsyncOpenAI, async_http_client) if awaited else (openai.OpenAI, http_client)
    return sdk(
        base_url=conn.endpoint_url.rstrip("/"),
        api_key=conn.api_key or "none",
        timeout=_timeout(),
        max_retries=getattr(settings, "PROVIDER_MAX_RETRIES", MAX_RETRIES),
        http_client=transport(connect=CONNECT_TIMEOUT, read=_timeout().read),
    )


_SECRETISH = re.compile(r"(sk-[A-Za-z0-9_\-*]{4,}|Bearer\s+\S+)")


def _scrub(text: str, conn: Connection) -> str:
    text = text.replace(conn.api_key, "[key]") if conn.api_key else text
    return _SECRETISH.sub("[key]", text)[:300]


def _translate(exc: Exception, conn: Connection) -> ProviderError:
    """Map an SDK failure onto the errors a player can act on."""
    cause = exc
    while cause is not None:
        if isinstance(cause, EndpointRefused):
            return ProviderError("refused", str(cause))
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(cause):
            return ProviderError("unreachable", "the model endpoint's TLS certificate is not trusted (it must be "
                                 "signed by a public certificate authority and match the host); check the endpoint URL")
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError("timeout", "the model endpoint did not answer in time; try again or use a faster model")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError("unreachable", "the model endpoint could not be reached; check the endpoint URL")
    if isinstance(exc, openai.AuthenticationError):
        return ProviderError("bad_key", "the model endpoint refused the API key; check the key in your settings")
    if isinstance(exc, openai.PermissionDeniedError):
        return ProviderError("forbidden", "the model endpoint refused access with this key (403)")
    if isinstance(exc, openai.NotFoundError):
        return ProviderError(
            "model_not_found",
            f"the endpoint has no model {conn.model!r} (or the endpoint URL is wrong); check the model name",
        )
    if isinstance(exc, openai.RateLimitError):
        retry_after = None
        try:
            retry_after = int(float(exc.response.headers.get("retry-after", "")))
        except (TypeError, ValueError):
            pass
        return ProviderError("rate_limited", "the model endpoint is rate limiting this key; wait and try again",
                             retry_after=retry_after)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if 300 <= status < 400:
            return ProviderError("redirect", "the model endpoint answered with a redirect; use the final URL (redirects are not followed)")
        detail = _scrub(getattr(exc, "message", "") or "", conn)
        return ProviderError("endpoint_error", f"the model endpoint answered {status}: {detail}".rstrip(": "))
    return ProviderError("bad_response", "the model endpoint sent a response that is not OpenAI-compatible")


def record_call(*, user_id, adventure_id, purpose, conn, outcome, started, error="", prompt=0, completion=0) -> None:
    ProviderCall.objects.create(
        user_id=user_id, adventure_id=adventure_id, purpose=purpose,
        endpoint_host=(urlsplit(conn.endpoint_url).hostname or "")[:255], model=conn.model[:200],
        prompt_tokens=prompt, completion_tokens=completion,
        latency_ms=int((time.monotonic() - started) * 1000), outcome=outcome, error=error[:500], demo=conn.demo,
    )


def complete(
    *, conn: Connection, messages: list[dict], max_tokens: int, temperature: float, user_id: int,
    purpose: str, adventure_id: int | None = None, reasoning_max_tokens: int = 0,
) -> Completion:
    """One chat completion. Raises ProviderError; records the call either way."""
    if not conn.endpoint_url or not conn.model:
        raise ProviderError("not_configured", "no model is set up: add an endpoint URL and model in your settings")
    if purpose in (ProviderCall.Purpose.TURN, ProviderCall.Purpose.TEST):
        limits.model_call(user_id=user_id)  # calls a player triggers; background work is bounded per pass
    started = time.monotonic()
    extra = {"reasoning": {"max_tokens": reasoning_max_tokens}} if reasoning_max_tokens else None
    try:
        response = _client(conn).chat.completions.create(
            model=conn.model, messages=messages, max_tokens=max_tokens, temperature=temperature,
            extra_body=extra,
        )
        choice = response.choices[0]
        text = (choice.message.content or "").strip()
    except ProviderError as exc:
        record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome=exc.code,
                started=started, error=exc.message)
        raise
    except (openai.OpenAIError, EndpointRefused, IndexError, AttributeError, TypeError, ValueError) as exc:
        error = _translate(exc, conn)
        log.info("model call failed: %s (%s, model %s)", error.code, urlsplit(conn.endpoint_url).hostname, conn.model)
        record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome=error.code,
                started=started, error=error.message)
        raise error from None
    usage = response.usage
    result = Completion(
        text=text, model=response.model or conn.model,
        prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        latency_ms=int((time.monotonic() - started) * 1000), finish_reason=choice.finish_reason,
    )
    if not text:
        record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome="empty",
                started=started, error="the model returned no text", prompt=result.prompt_tokens)
        raise ProviderError("empty", "the model returned no text; try again")
    record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome="ok", started=started,
            prompt=result.prompt_tokens, completion=result.completion_tokens)
    return result


def embed(*, conn: Connection, texts: list[str], user_id: int, purpose: str = ProviderCall.Purpose.EMBEDDING,
          adventure_id: int | None = None) -> list[list[float]]:
    """Embeddings for ``texts`` (one request). Raises ProviderError; records the call."""
    started = time.monotonic()
    try:
        response = _client(conn).embeddings.create(model=conn.model, input=texts)
        vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise ValueError("wrong number of embeddings")
    except ProviderError as exc:
        record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome=exc.code,
                started=started, error=exc.message)
        raise
    except (openai.OpenAIError, EndpointRefused, IndexError, AttributeError, TypeError, ValueError) as exc:
        error = _translate(exc, conn)
        record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome=error.code,
                started=started, error=error.message)
        raise error from None
    usage = getattr(response, "usage", None)
    record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, outcome="ok", started=started,
            prompt=getattr(usage, "prompt_tokens", 0) or 0)
    return vectors


def _stream_error(error, conn: Connection) -> ProviderError:
    """An error event in the middle of a stream."""
    message = error.get("message") if isinstance(error, dict) else str(error)
    detail = _scrub(str(message or ""), conn)
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
    """The data of the events each network read completed; at the end, an event the server left unterminated."""
    events = _EventStream()
    async for raw in http_response.aiter_bytes():
        yield events.feed(raw)
    yield events.feed(b"\n\n")


_FAILURES = (openai.OpenAIError, EndpointRefused, IndexError, AttributeError, TypeError, ValueError)


class ModelCall:
    """One chat completion awaited on the event loop: a turn's model call. It
    holds no thread and touches no database; the caller records it
    (``record``) in its next database step. ``deltas()`` yields the text as the
    model writes it (all at once unless ``stream``); afterwards ``completion``
    is set, or ProviderError was raised and ``error`` is set. ``text`` is what
    arrived so far, which is what a stopped reply keeps."""

    def __init__(self, *, conn: Connection, messages: list[dict], max_tokens: int, temperature: float,
                 reasoning_max_tokens: int = 0, stream: bool = False):
        self.conn = conn
        # The messages go in as extra_body, which the SDK sends as they are: passed as ``messages``
        # the SDK walks every part of the prompt to transform it, ~10 ms of CPU for a full context.
        body = {"messages": messages}
        if reasoning_max_tokens:
            body["reasoning"] = {"max_tokens": reasoning_max_tokens}
        self.request = {"model": conn.model, "messages": [], "max_tokens": max_tokens, "temperature": temperature,
                        "extra_body": body}
        self.stream = stream
        self.text = ""
        self.completion: Completion | None = None
        self.error: ProviderError | None = None
        self.started = time.monotonic()

    async def deltas(self) -> AsyncIterator[str]:
        conn = self.conn
        self.started = time.monotonic()
        if not conn.endpoint_url or not conn.model:
            self.error = ProviderError("not_configured",
                                       "no model is set up: add an endpoint URL and model in your settings")
            raise self.error
        model, usage, finish = conn.model, None, None
        try:
            client = _client(conn, awaited=True)
            if self.stream:
                # The raw event stream, parsed here a network read at a time: the SDK's typed chunks
                # and line iterators cost ~0.5 ms of CPU a piece, and everything that arrived in one
                # read goes on as one piece (a fast model sends several per read).
                async with client.chat.completions.with_streaming_response.create(
                        **self.request, stream=True, stream_options={"include_usage": True}) as response:
                    done = False
                    async for datas in _event_data(response.http_response):
                        pieces = []
                        for data in datas:
                            if data == b"[DONE]":
                                done = True
                                break
                            chunk = json.loads(data)
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
                            self.text += piece
                            yield piece
                        if done:
                            break
            else:
                response = await client.chat.completions.create(**self.request)
                choice = response.choices[0]
                model, usage, finish = response.model or model, response.usage, choice.finish_reason
                self.text = choice.message.content or ""
                if self.text:
                    yield self.text
        except ProviderError as exc:
            self.error = exc
            raise
        except _FAILURES as exc:
            self.error = _translate(exc, conn)
            log.info("model call failed: %s (%s, model %s)", self.error.code, urlsplit(conn.endpoint_url).hostname,
                     conn.model)
            raise self.error from None
        if isinstance(usage, dict):
            usage = openai.types.CompletionUsage.model_construct(**usage)
        self.completion = Completion(
            text=self.text.strip(), model=model,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            latency_ms=int((time.monotonic() - self.started) * 1000), finish_reason=finish,
        )
        if not self.completion.text:
            self.error = ProviderError("empty", "the model returned no text; try again")
            raise self.error

    def record(self, *, user_id: int, purpose: str, adventure_id: int | None, stopped: bool = False) -> None:
        """Write the call to the user's debug log (a database step)."""
        c = self.completion
        if self.error is not None:
            record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=self.conn,
                        outcome=self.error.code, started=self.started, error=self.error.message,
                        prompt=c.prompt_tokens if c else 0)
        elif stopped or c is None:
            record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=self.conn,
                        outcome="stopped", started=self.started,
                        error=f"stopped by the player after {len(self.text)} characters")
        else:
            record_call(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=self.conn, outcome="ok",
                        started=self.started, prompt=c.prompt_tokens, completion=c.completion_tokens)
