"""Reading settings from the environment. Every bad value raises
ImproperlyConfigured with a message that starts with the variable's name."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value.strip()


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    value = default if raw is None or raw.strip() == "" else raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}: expected one of {', '.join(choices)}; got {raw!r}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: expected one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a whole number; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}: must be at least {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}: must be at most {maximum}; got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    """A number of seconds (or another unit) that may have decimals, within its bounds."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a number; got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name}: must be between {minimum:g} and {maximum:g}; got {value:g}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def check_networks(name: str, items: list[str]) -> list[str]:
    """IP addresses or CIDR ranges (``10.0.0.0/8``, ``::1``)."""
    import ipaddress

    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or CIDR range") from None
    return items


def parse_database_url(name: str, url: str) -> dict:
    """A Django DATABASES entry from a postgres:// URL."""
    import dj_database_url

    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"{name}: expected postgres://user:password@host:port/dbname (PostgreSQL with pgvector); "
            f"got a URL with scheme {parts.scheme or '(none)'!r}"
        )
    try:
        if parts.port is not None and not 0 < parts.port < 65536:
            raise ValueError
    except ValueError:
        raise ImproperlyConfigured(f"{name}: the port is not a number from 1 to 65535") from None
    try:
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except Exception as exc:  # dj_database_url raises several types
        raise ImproperlyConfigured(f"{name}: could not be parsed ({exc.__class__.__name__})") from None
    # A unix-socket host arrives as ?host=/path; keep it where Django and tools look.
    socket_host = config.get("OPTIONS", {}).pop("host", None)
    if socket_host and not config.get("HOST"):
        config["HOST"] = socket_host
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"{name}: the URL names no database (add /dbname)")
    if not config.get("HOST"):
        raise ImproperlyConfigured(f"{name}: the URL names no host")
    config["ENGINE"] = "django.db.backends.postgresql"
    # An unreachable host fails a request in seconds (a 503), not after the OS's
    # two-minute TCP timeout with a web thread held; ?connect_timeout= overrides.
    config.setdefault("OPTIONS", {}).setdefault("connect_timeout", DATABASE_CONNECT_TIMEOUT_S)
    return config


DATABASE_CONNECT_TIMEOUT_S = 3


def check_redis_url(name: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"{name}: expected redis://[:password@]host:port/db, rediss://... or unix:///path; "
            f"got a URL with scheme {parts.scheme or '(none)'!r}"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ImproperlyConfigured(f"{name}: the URL names no host")
    try:
        parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name}: the port is not a number from 1 to 65535") from None
    return url


def check_fernet_keys(name: str, keys: list[str]) -> list[str]:
    from cryptography.fernet import Fernet

    if not keys:
        raise ImproperlyConfigured(
            f"{name}: at least one key is required (generate one with "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
        )
    for index, key in enumerate(keys, start=1):
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"{name}: key #{index} is not a Fernet key (32 url-safe base64-encoded bytes)"
            ) from None
    return keys
