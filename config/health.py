"""GET /healthz: the state of the database, Redis and the worker pool."""

from __future__ import annotations

import time

import psycopg
import psycopg_pool
import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.redis_pool import redis_client

_heartbeats_read = None  # hostname -> unix time of its last heartbeat; the workers app provides it


def provide_heartbeats(reader) -> None:
    """``reader(client=...)`` returns the live workers' last heartbeats (workers.apps, when ready)."""
    global _heartbeats_read
    _heartbeats_read = reader


POOL_PROBE_S = 1.0  # how long /healthz waits for one of the pool's connections


def pool_status() -> dict | None:
    """Whether this web process's pool gives a connection within POOL_PROBE_S (its requests wait
    DB_POOL_TIMEOUT for one, then answer 503); None in a process without a pool."""
    if not settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
        return None
    pool = connection.pool
    pool.open()
    stats = pool.get_stats()
    state = {"size": stats.get("pool_size", 0), "in_use": stats.get("pool_size", 0) - stats.get("pool_available", 0)}
    try:
        with pool.connection(timeout=POOL_PROBE_S):
            pass
    except psycopg_pool.PoolTimeout:
        return {
            "ok": False,
            **state,
            "waiting": stats.get("requests_waiting", 0),
            "error": f"the web process's connection pool gave no connection within {POOL_PROBE_S:g} s "
            f"({state['in_use']} of {settings.DB_POOL_SIZE} in use): requests are answering 503",
        }
    except psycopg.Error as exc:
        return {"ok": False, **state, "error": f"the pool's connection failed ({exc.__class__.__name__})"}
    return {"ok": True, **state}


def database_status() -> dict:
    """Whether the database answers, with pgvector, and (a web process) whether its pool gives a
    connection. A web process asks the database on a connection of its own (opened and closed
    here): a probe never waits behind the turns that hold the pool's connections."""
    try:
        if settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
            row = _ask_outside_the_pool()
        else:
            with connection.cursor() as cursor:
                cursor.execute(PGVECTOR_VERSION)
                row = cursor.fetchone()
    except (DatabaseError, psycopg.Error) as exc:
        return {"ok": False, "error": f"unreachable ({exc.__class__.__name__})"}
    if row is None:
        return {"ok": False, "error": "the pgvector extension is not installed (run migrations)"}
    pool = pool_status()
    if pool is None:
        return {"ok": True, "pgvector": row[0]}
    return {"ok": pool["ok"], "pgvector": row[0], "pool": pool, **({"error": pool["error"]} if not pool["ok"] else {})}


PGVECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"


def _ask_outside_the_pool():
    params = dict(connection.get_connection_params())
    params.pop("pool", None)
    with psycopg.connect(**params, autocommit=True) as conn:
        return conn.execute(PGVECTOR_VERSION).fetchone()


def redis_status() -> tuple[dict, redis.Redis | None]:
    client = redis_client()
    try:
        client.ping()
    except redis.AuthenticationError:
        return {"ok": False, "error": "refused the password in REDIS_URL"}, None
    except redis.RedisError as exc:
        return {"ok": False, "error": f"unreachable ({exc.__class__.__name__})"}, None
    return {"ok": True}, client


def worker_status(client: redis.Redis | None) -> dict:
    if client is None:
        return {"ok": False, "error": "unknown while Redis is down"}
    if _heartbeats_read is None:
        return {"ok": False, "workers": 0, "error": "no worker pool is installed in this site"}
    try:
        beats = _heartbeats_read(client=client)
    except redis.RedisError as exc:
        return {"ok": False, "error": f"unreadable ({exc.__class__.__name__})"}
    if not beats:
        return {
            "ok": False,
            "workers": 0,
            "error": f"no worker heartbeat in the last {settings.WORKER_HEARTBEAT_STALE}s (start `celery -A config worker`)",
        }
    last = max(beats.values())
    return {
        "ok": True,
        "workers": len(beats),
        "last_heartbeat_age_s": round(max(0.0, time.time() - last), 1),
    }


@never_cache
@require_GET
def healthz(request):
    database = database_status()
    redis_state, client = redis_status()
    worker = worker_status(client)
    parts = {"database": database, "redis": redis_state, "worker": worker}
    down = [f"{name}: {state['error']}" for name, state in parts.items() if not state["ok"]]
    body = {"status": "ok" if not down else "down", **parts, "down": down}
    return JsonResponse(body, status=200 if not down else 503)


@never_cache
@require_GET
def livez(request):
    """The web process answers; for load-balancer and container liveness checks."""
    return JsonResponse({"status": "ok"})
