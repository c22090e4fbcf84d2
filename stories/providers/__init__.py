"""The one door to any model: OpenAI-compatible chat and embeddings through the
`openai` SDK with the user's own endpoint and key.

Background work: timeouts (connect 5 s, read 120 s), bounded retries with
backoff on 429/5xx (the SDK's). A call a request waits on (``for_request``):
the whole call within REQUEST_MODEL_DEADLINE_S, tried once, one of the
account's OUTBOUND_CALLS_AT_ONCE places, and no database connection held
while it waits. No redirects, the SSRF guard on every connection. Every call
is recorded in ProviderCall for the user's debug log; keys never reach a log,
an error message or a response.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import re
import ssl
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2
import openai
from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.async_db import before_waiting_outside
from config.errors import UpstreamFailed
from stories import limits
from stories.models import ProviderCall
from stories.providers import answers, netguard
from stories.providers.netguard import (
    AnswerTooLarge,
    EndpointRefused,
    async_http_client,
    check_url_shape,
    http_client,
)

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
    """Where and as whom to call. ``demo`` marks the shared demo model; ``deadline_s`` (set by
    ``for_request``) marks a call a request waits on: all of it within that many seconds."""

    endpoint_url: str
    api_key: str
    model: str
    demo: bool = False
    deadline_s: float = 0

    def __repr__(self) -> str:  # never print the key
        return f"Connection({self.endpoint_url!r}, model={self.model!r}, demo={self.demo})"


def for_request(conn: Connection) -> Connection:
    """``conn`` for a call a request waits on (a connection test, a memory written again while the
    player waits): within REQUEST_MODEL_DEADLINE_S seconds in all, tried once."""
    return dataclasses.replace(conn, deadline_s=float(settings.REQUEST_MODEL_DEADLINE_S))


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    finish_reason: str | None
    cached_tokens: int = 0  # of the prompt, served from the server's prefix cache (when it says)


def cached_tokens(usage) -> int:
    """``usage.prompt_tokens_details.cached_tokens`` (OpenAI's field, which vLLM, llama.cpp and
    others also send), from the SDK's object or a stream's plain dict; 0 when it is not there."""
    details = (
        usage.get("prompt_tokens_details") if isinstance(usage, dict) else getattr(usage, "prompt_tokens_details", None)
    )
    value = details.get("cached_tokens") if isinstance(details, dict) else getattr(details, "cached_tokens", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _timeout() -> httpx2.Timeout:
    read = getattr(settings, "PROVIDER_READ_TIMEOUT", READ_TIMEOUT)
    return httpx2.Timeout(connect=CONNECT_TIMEOUT, read=read, write=30.0, pool=CONNECT_TIMEOUT)


CLIENTS_KEPT = 64  # SDK clients kept per event loop (and for the threads): the endpoints and keys in use


def client(conn: Connection, *, awaited: bool = False) -> openai.OpenAI | openai.AsyncOpenAI:
    """The SDK client for ``conn`` (``awaited``: the async one, for the event loop); a call a
    request waits on is tried once. Kept for the next call with the same endpoint, key and bounds
    (building one, its URL and options, was ~1.7% of a web process's CPU in the evening bench):
    a client holds only what ``conn`` holds, and the kept ones are looked up by the key itself."""
    try:
        check_url_shape(conn.endpoint_url)
    except EndpointRefused as exc:
        raise ProviderError("refused", str(exc)) from None
    timeout = _timeout()
    retries = 0 if conn.deadline_s else getattr(settings, "PROVIDER_MAX_RETRIES", MAX_RETRIES)
    ident = (conn.endpoint_url, conn.api_key, retries, timeout.read)
    if awaited:
        kept = _async_kept.get(asyncio.get_running_loop())
        if kept is None:
            kept = _async_kept[asyncio.get_running_loop()] = collections.OrderedDict()
    else:
        kept = _sync_kept
    with _kept_lock:
        found = kept.get(ident)
        if found is not None:
            kept.move_to_end(ident)
            return found
    made = _made(conn, awaited=awaited, timeout=timeout, retries=retries)
    with _kept_lock:
        kept[ident] = made
        while len(kept) > CLIENTS_KEPT:
            kept.popitem(last=False)
    return made


_async_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its clients (a client's
_sync_kept: collections.OrderedDict = collections.OrderedDict()  # connections belong to one loop)
_kept_lock = threading.Lock()


def _made(conn: Connection, *, awaited: bool, timeout: httpx2.Timeout, retries: int):
    sdk, transport = (openai.AsyncOpenAI, async_http_client) if awaited else (openai.OpenAI, http_client)
    made = sdk(
        base_url=conn.endpoint_url.rstrip("/"),
        api_key=conn.api_key or "none",
        timeout=timeout,
        max_retries=retries,
        http_client=transport(connect=CONNECT_TIMEOUT, read=timeout.read),
    )
    if awaited and getattr(made, "_platform", "") is None:
        # the async SDK asks the OS which platform it runs on once per client, on a thread (a thread
        # hop on every turn's model call): the answer never changes, so it is asked once a process
        made._platform = _sdk_platform()
    return made


@functools.lru_cache(maxsize=1)
def _sdk_platform():
    from openai._base_client import get_platform

    return get_platform()


def warm_up() -> None:
    """Ask the platform as a web process starts (a few ms reading the OS), not on its first turn."""
    _sdk_platform()


@contextmanager
def _waiting_outside(conn: Connection, *, user_id: int):
    """Around a wait on the endpoint. A web process's database connections go back to its pool
    first (released, never held while the endpoint answers); a call a request waits on takes
    one of the account's places and ends by its deadline."""
    before_waiting_outside()
    if not conn.deadline_s:
        yield
        return
    with limits.outbound(user_id=user_id, hold_s=conn.deadline_s), netguard.deadline(conn.deadline_s):
        yield


_SECRETISH = re.compile(r"(sk-[A-Za-z0-9_\-*]{4,}|Bearer\s+\S+)")


def scrub(text: str, conn: Connection) -> str:
    """``text`` from the endpoint without the key (or anything shaped like one), at most 300 characters."""
    text = text.replace(conn.api_key, "[key]") if conn.api_key else text
    return _SECRETISH.sub("[key]", text)[:300]


def _translate(exc: Exception, conn: Connection) -> ProviderError:
    """Map an SDK failure onto the errors a player can act on."""
    cause = exc
    while cause is not None:
        if isinstance(cause, EndpointRefused):
            return ProviderError("refused", str(cause))
        if isinstance(cause, AnswerTooLarge):
            return ProviderError("too_large", str(cause))
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(cause):
            return ProviderError(
                "unreachable",
                "the model endpoint's TLS certificate is not trusted (it must be "
                "signed by a public certificate authority and match the host); check the endpoint URL",
            )
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx2.TimeoutException):  # a streamed answer's read: the SDK wraps only its request's
        return ProviderError(
            "timeout",
            "the model endpoint stopped writing and did not go on in time; what it wrote is not kept, try again",
        )
    if isinstance(exc, httpx2.TransportError):
        return ProviderError(
            "unreachable",
            "the connection to the model endpoint broke while it was writing; what it wrote is not kept, try again",
        )
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
        return ProviderError(
            "rate_limited", "the model endpoint is rate limiting this key; wait and try again", retry_after=retry_after
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if 300 <= status < 400:
            return ProviderError(
                "redirect",
                "the model endpoint answered with a redirect; use the final URL (redirects are not followed)",
            )
        detail = scrub(getattr(exc, "message", "") or "", conn)
        return ProviderError("endpoint_error", f"the model endpoint answered {status}: {detail}".rstrip(": "))
    return ProviderError("bad_response", "the model endpoint sent a response that is not OpenAI-compatible")


def record_call(
    *, user_id, adventure_id, purpose, conn, outcome, started, error="", prompt=0, completion=0, cached=0, sent=b""
) -> None:
    """A row of the user's debug log; ``sent``: the prompt's fingerprint (stories.prompt.prefix).
    Every turn writes one: an insert as written (the ORM's model and compile were ~2% of a turn's CPU).
    A call whose story was deleted meanwhile is logged with none (as the story's deletion leaves the
    rows before it); one whose user was deleted is not logged (their log went with them)."""
    with connection.cursor() as db:
        db.execute(
            _record_sql(),
            [
                user_id,
                adventure_id,
                purpose,
                (urlsplit(conn.endpoint_url).hostname or "")[:255],
                conn.model[:200],
                prompt,
                completion,
                min(cached, prompt) if prompt else cached,
                bytes(sent),
                int((time.monotonic() - started) * 1000),
                outcome,
                error[:500],
                conn.demo,
                timezone.now(),
                user_id,
            ],
        )


@functools.cache
def _record_sql() -> str:
    adventures = ProviderCall._meta.get_field("adventure").related_model._meta.db_table
    users = ProviderCall._meta.get_field("user").related_model._meta.db_table
    return _RECORD_SQL.format(adventures=adventures, users=users)


_RECORD_SQL = (
    f"INSERT INTO {ProviderCall._meta.db_table} (user_id, adventure_id, purpose, endpoint_host, model, prompt_tokens,"
    " completion_tokens, cached_tokens, prompt_fingerprint, latency_ms, outcome, error, demo, created_at)"
    " SELECT %s, (SELECT id FROM {adventures} WHERE id = %s), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s"
    " WHERE EXISTS (SELECT 1 FROM {users} WHERE id = %s)"
)


# What a call may raise that is the endpoint's fault (a refused address, an SDK error, an answer
# of another shape than OpenAI's), translated into a ProviderError for the player.
FAILURES = (
    openai.OpenAIError,
    httpx2.TransportError,  # a streamed answer's body is read past the SDK: its failures come as they are
    EndpointRefused,
    IndexError,
    AttributeError,
    TypeError,
    ValueError,
)


def failed(exc: Exception, conn: Connection) -> ProviderError:
    """The endpoint's failure as the player reads it, logged without the key or the prompt."""
    error = _translate(exc, conn)
    log.info("model call failed: %s (%s, model %s)", error.code, urlsplit(conn.endpoint_url).hostname, conn.model)
    return error


@contextmanager
def _recorded_failure(*, user_id, adventure_id, purpose, conn: Connection, started: float):
    """A call that fails inside is recorded for the user's debug log and raised as a ProviderError."""
    try:
        yield
    except (ProviderError, *FAILURES) as exc:
        error = exc if isinstance(exc, ProviderError) else failed(exc, conn)
        record_call(
            user_id=user_id,
            adventure_id=adventure_id,
            purpose=purpose,
            conn=conn,
            outcome=error.code,
            started=started,
            error=error.message,
        )
        raise error from None


def complete(
    *,
    conn: Connection,
    messages: list[dict],
    max_tokens: int,
    temperature: float,
    user_id: int,
    purpose: str,
    adventure_id: int | None = None,
    reasoning_max_tokens: int = 0,
) -> Completion:
    """One chat completion. Raises ProviderError; records the call either way."""
    if not conn.endpoint_url or not conn.model:
        raise ProviderError("not_configured", "no model is set up: add an endpoint URL and model in your settings")
    if conn.deadline_s or purpose in (ProviderCall.Purpose.TURN, ProviderCall.Purpose.TEST):
        limits.model_call(user_id=user_id)  # calls a player triggers; background work is bounded per pass
    started = time.monotonic()
    # Everything but the model in extra_body, sent as it is (as awaited.ModelCall does): passed as the
    # SDK's own arguments, a block's messages were walked against their declared types (6.6% of the
    # pass worker's CPU, bench/together.py).
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    if reasoning_max_tokens:
        body["reasoning"] = {"max_tokens": reasoning_max_tokens}
    with (
        _recorded_failure(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, started=started),
        _waiting_outside(conn, user_id=user_id),
    ):
        # the SDK's own post, its answer as sent (answers.chat_answer): the model object made of it and
        # the request's walk were ~40% of a call's CPU in the pass (cProfile, bench pass harness)
        data = client(conn).post("/chat/completions", body={"model": conn.model, **body}, cast_to=object)
        text, model, usage, finish = answers.chat_answer(data)
        text = text.strip()
    result = Completion(
        text=text,
        model=model or conn.model,
        prompt_tokens=answers.count(usage, "prompt_tokens"),
        completion_tokens=answers.count(usage, "completion_tokens"),
        latency_ms=int((time.monotonic() - started) * 1000),
        finish_reason=finish,
        cached_tokens=cached_tokens(usage),
    )
    if not text:
        record_call(
            user_id=user_id,
            adventure_id=adventure_id,
            purpose=purpose,
            conn=conn,
            outcome="empty",
            started=started,
            error="the model returned no text",
            prompt=result.prompt_tokens,
        )
        raise ProviderError("empty", "the model returned no text; try again")
    record_call(
        user_id=user_id,
        adventure_id=adventure_id,
        purpose=purpose,
        conn=conn,
        outcome="ok",
        started=started,
        prompt=result.prompt_tokens,
        completion=result.completion_tokens,
        cached=result.cached_tokens,
    )
    return result
