"""Users' AI settings and which connection a piece of work may spend.

``connection_for_turn`` may fall back to the shared demo model; ``connection_for_background``
never does: it reads only the owner's own settings, so background work cannot
spend the demo key (or anyone else's) by construction.
"""

from __future__ import annotations

import copy
import datetime as dt
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import transaction

from config import local_model
from config.errors import RateLimited
from config.redis_pool import redis_client
from stories.accounts import crypto
from stories.models import AISettings
from stories.prompt import sampling
from stories.providers import Connection, ProviderError, for_request
from stories.providers.netguard import check_endpoint

SETTINGS_FIELDS = (
    "endpoint_url",
    "model",
    "summary_model",
    "embedding_model",
    "context_tokens",
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "stop",
    "reasoning_max_tokens",
    "memory_top_k",
    "memory_bank_capacity",
    "content_rating",  # the highest scenario rating the library shows (models.Rating)
    "persona_name",  # the player's persona, every new adventure's unless it is given one
    "persona_pronouns",
    "persona_description",
)
PERSONA_FIELDS = ("persona_name", "persona_pronouns", "persona_description")
DEMO_COUNTER_PREFIX = "everlore:demo-turns:"


def ai_settings_of(*, user_id: int) -> AISettings:
    """The player's AI settings as stored, or the defaults (unsaved) when they never saved any.
    Writes nothing: ``ai_settings_update`` stores them."""
    return AISettings.objects.filter(user_id=user_id).first() or AISettings(user_id=user_id)


def ai_settings_loaded(*, adventure, user_id: int) -> AISettings:
    """The owner's settings as read with the adventure (``access_adventure(..., for_play=True)``
    joins them), else read now. ``user_id`` owns ``adventure``."""
    if type(adventure).owner.is_cached(adventure) and type(adventure.owner).ai_settings.is_cached(adventure.owner):
        try:
            return adventure.owner.ai_settings
        except AISettings.DoesNotExist:  # joined, and none stored yet
            pass
    return ai_settings_of(user_id=user_id)


def for_adventure(ai: AISettings, adventure) -> AISettings:
    """The settings a turn of ``adventure`` plays with: the player's, with the adventure's own model
    and sampling preset where it has them (a copy; never saved)."""
    if not (adventure.model or adventure.sampling_preset):
        return ai
    ai = copy.copy(ai)
    if adventure.model:
        ai.model = adventure.model
    for name, value in sampling.PRESETS.get(adventure.sampling_preset, {}).items():
        setattr(ai, name, value)
    return ai


def persona_of(*, user_id: int) -> dict[str, str]:
    """The player's persona as a new adventure takes it (its fields; empty where not set)."""
    row = AISettings.objects.filter(user_id=user_id).values(*PERSONA_FIELDS).first()
    return row or dict.fromkeys(PERSONA_FIELDS, "")


def endpoint_origin(url: str) -> str:
    """``scheme://host:port`` of an endpoint URL (the default port spelled out, the
    host in lower case): what a key is bound to. "" for no URL or a malformed one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return ""
    if not parts.hostname:
        return ""
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"


def ai_settings_update(*, user_id: int, api_key: str | None = None, **fields) -> AISettings:
    """Update settings. ``api_key``: None keeps the stored key, "" removes it,
    anything else replaces it (encrypted; only its last 4 characters are kept
    in clear). The endpoint is checked against the SSRF rules when it changes.

    A key is bound to the endpoint it was entered for (scheme, host and port):
    moving the endpoint elsewhere without a new key in the same request removes
    the stored key, and the returned settings say so (``api_key_cleared``), so a
    session or token alone can never send the key to a host of its choosing."""
    unknown = set(fields) - set(SETTINGS_FIELDS)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    stored = ai_settings_of(user_id=user_id)
    if fields.get("endpoint_url") and fields["endpoint_url"] != stored.endpoint_url:
        check_endpoint(fields["endpoint_url"])  # resolves the host: before the row lock, holding no connection
    with transaction.atomic():
        AISettings.objects.get_or_create(user_id=user_id)
        obj = AISettings.objects.select_for_update().get(user_id=user_id)
        cleared = (
            api_key is None
            and obj.api_key_encrypted
            and "endpoint_url" in fields
            and endpoint_origin(fields["endpoint_url"]) != endpoint_origin(obj.endpoint_url)
        )
        if cleared:
            api_key = ""
        for name, value in fields.items():
            setattr(obj, name, value)
        changed = list(fields)
        if api_key is not None:
            obj.api_key_encrypted = crypto.encrypt(api_key) if api_key else ""
            obj.api_key_last4 = api_key[-4:] if api_key else ""
            obj.api_key_origin = endpoint_origin(obj.endpoint_url) if api_key else ""
            changed += ["api_key_encrypted", "api_key_last4", "api_key_origin"]
        if changed:
            obj.save(update_fields=[*changed, "updated_at"])
    obj.api_key_cleared = bool(cleared)
    return obj


def _own(obj: AISettings, model: str) -> Connection:
    """The player's connection; the key only if it was entered for this very endpoint
    (a row changed behind the API, an admin's or a migration's, never redirects it)."""
    bound = obj.api_key_encrypted and obj.api_key_origin and obj.api_key_origin == endpoint_origin(obj.endpoint_url)
    return Connection(
        endpoint_url=obj.endpoint_url,
        api_key=crypto.decrypt(obj.api_key_encrypted) if bound else "",
        model=model,
    )


def demo_available() -> bool:
    return bool(settings.DEMO_ENDPOINT_URL and settings.DEMO_MODELS and settings.DEMO_TURNS_PER_DAY)


def demo_local_status() -> dict | None:
    """The local demo model's state (config.local_model) when it is the demo model, else None."""
    return local_model.status(settings.DATA_DIR) if settings.DEMO_LOCAL and demo_available() else None


def connection_for_turn(*, user_id: int, ai: AISettings | None = None) -> Connection:
    """The user's own model, else the demo model (counting a demo turn).
    ``ai``: the user's settings when the caller has loaded them already."""
    obj = ai or ai_settings_of(user_id=user_id)
    if obj.endpoint_url and obj.model:
        return _own(obj, obj.model)
    if demo_available():
        local = demo_local_status()
        if local is not None and local["state"] != "ready":  # said before a demo turn is counted
            raise ProviderError("unreachable", local_model.describe(local))
        _count_demo_turn(user_id)
        model = obj.model if obj.model in settings.DEMO_MODELS else settings.DEMO_MODELS[0]
        return Connection(
            endpoint_url=settings.DEMO_ENDPOINT_URL, api_key=settings.DEMO_API_KEY, model=model, demo=True
        )
    raise ProviderError("not_configured", "no model is set up: add an endpoint URL and model in your settings")


def connection_for_listing(*, user_id: int) -> Connection:
    """The player's endpoint, to list its models while they wait: a model need not be chosen yet."""
    obj = ai_settings_of(user_id=user_id)
    if not obj.endpoint_url:
        raise ProviderError("not_configured", "set an endpoint URL first")
    return for_request(_own(obj, obj.model))


def connection_for_test(*, user_id: int) -> Connection:
    """The player's model as saved, to test while they wait."""
    return connection_typed(user_id=user_id, endpoint_url=None, api_key=None, model=None, need_model=True)


def connection_typed(
    *, user_id: int, endpoint_url: str | None, api_key: str | None, model: str | None, need_model: bool
) -> Connection:
    """The connection the Settings form holds before it is saved, to list models or test it: each
    value typed there, else the stored one. The stored key goes only to the endpoint it was entered
    for: a typed endpoint elsewhere gets the typed key or none."""
    obj = ai_settings_of(user_id=user_id)
    url = (obj.endpoint_url if endpoint_url is None else endpoint_url).strip()
    model = (obj.model if model is None else model).strip()
    if not url:
        raise ProviderError("not_configured", "set an endpoint URL first")
    if need_model and not model:
        raise ProviderError("not_configured", "set a model first (Load the endpoint's models lists them)")
    if url != obj.endpoint_url:
        check_endpoint(url)  # the SSRF rules, as a save would apply them
    bound = bool(endpoint_origin(url)) and endpoint_origin(url) == endpoint_origin(obj.endpoint_url)
    key = api_key or (_own(obj, model).api_key if bound else "")
    return for_request(Connection(endpoint_url=url, api_key=key, model=model))


def background_model(*, user_id: int, purpose: str, ai: AISettings | None = None) -> str:
    """The owner's own model for summaries ("summary") or embeddings ("embedding"),
    or "" when the owner has not set one up. Reads no key."""
    obj = ai if ai is not None and ai.user_id == user_id else ai_settings_of(user_id=user_id)
    if not obj.endpoint_url:
        return ""
    return {"summary": obj.summary_model or obj.model, "embedding": obj.embedding_model}[purpose]


def connection_for_background(*, user_id: int, purpose: str, ai: AISettings | None = None) -> Connection | None:
    """The owner's own connection for summaries ("summary") or embeddings
    ("embedding"), or None when the owner has not set one up. Never the demo.
    ``ai``: the owner's settings when the caller has loaded them already.
    Raises SecretUnreadable when the stored key cannot be decrypted."""
    obj = ai if ai is not None and ai.user_id == user_id else ai_settings_of(user_id=user_id)
    model = background_model(user_id=user_id, purpose=purpose, ai=obj)
    return _own(obj, model) if model else None


def demo_refund(*, user_id: int) -> None:
    """Give back a demo turn whose model call failed."""
    try:
        _redis().decr(_demo_key(user_id))
    except redis.RedisError:
        pass


def _redis() -> redis.Redis:
    return redis_client()


def _demo_key(user_id: int) -> str:
    return f"{DEMO_COUNTER_PREFIX}{user_id}:{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}"


def _count_demo_turn(user_id: int) -> None:
    """Atomic per-user daily counter in Redis; 429 past DEMO_TURNS_PER_DAY."""
    now = dt.datetime.now(dt.timezone.utc)
    midnight = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    key = _demo_key(user_id)
    try:
        pipe = _redis().pipeline()
        pipe.incr(key)
        pipe.expire(key, 2 * 24 * 3600)
        used, _ = pipe.execute()
    except redis.RedisError:
        raise ProviderError("unreachable", "the demo model is unavailable right now; set up your own model") from None
    if used > settings.DEMO_TURNS_PER_DAY:
        raise RateLimited(
            f"you have used today's {settings.DEMO_TURNS_PER_DAY} demo turns; add your own model in settings "
            "or come back tomorrow",
            retry_after=int((midnight - now).total_seconds()) + 1,
        )


def model_for_display(*, user_id: int) -> str:
    """The model name the next turn would use (for token counting), spending nothing."""
    obj = ai_settings_of(user_id=user_id)
    if obj.endpoint_url and obj.model:
        return obj.model
    if demo_available():
        return obj.model if obj.model in settings.DEMO_MODELS else settings.DEMO_MODELS[0]
    return obj.model
