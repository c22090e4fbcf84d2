import subprocess
import sys

import pytest
from django.db import connection

from tests.support.processes import ROOT, child_env

GOOD = {
    "DATABASE_URL": "postgres://u:p@db.example:5432/everlore",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "SECRET_KEY": "x" * 50,
    "FIELD_ENCRYPTION_KEYS": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    "EVERLORE_EMBEDDED": None,
}


def boot(tmp_path, **overrides):
    """Load the settings in a fresh process, as `manage.py` would at start."""
    env = child_env(DATA_DIR=str(tmp_path / "data"), **{**GOOD, **overrides})
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('booted')"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db
def test_migrations_install_pgvector_0_5_or_newer():
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        (version,) = cursor.fetchone()
    assert tuple(int(p) for p in version.split(".")[:2]) >= (0, 5)


def test_valid_environment_boots(tmp_path):
    result = boot(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "booted" in result.stdout
    assert not (tmp_path / "data").exists(), "nothing embedded may start when URLs are given"


def test_importing_the_settings_starts_no_server_and_names_what_is_missing(tmp_path):
    result = boot(tmp_path, DATABASE_URL=None, REDIS_URL=None, SECRET_KEY=None, FIELD_ENCRYPTION_KEYS=None)
    assert result.returncode != 0 and "booted" not in result.stdout
    last_line = result.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured: DATABASE_URL: required" in last_line and "manage.py runsite" in last_line
    assert not (tmp_path / "data").exists(), "importing settings must not start an embedded server"


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("DATABASE_URL", "mysql://u:p@db/everlore", "scheme 'mysql'"),
        ("DATABASE_URL", "postgres://u:p@db:99999/everlore", "port"),
        ("DATABASE_URL", "postgres://u:p@db:5432", "names no database"),
        ("DATABASE_URL", "just words", "expected postgres://"),
        ("REDIS_URL", "http://cache:6379", "scheme 'http'"),
        ("DEBUG", "maybe", "expected one of"),
        ("FIELD_ENCRYPTION_KEYS", "not-a-key", "not a Fernet key"),
        ("SECRET_KEY", "", "required"),
        ("LOG_LEVEL", "LOUD", "expected DEBUG"),
    ],
)
def test_bad_setting_fails_at_start_naming_the_variable(tmp_path, name, value, says):
    result = boot(tmp_path, **{name: value})
    assert result.returncode != 0
    assert "booted" not in result.stdout
    last_line = result.stderr.strip().splitlines()[-1]
    assert f"ImproperlyConfigured: {name}:" in last_line
    assert says in last_line
    assert "p@db" not in result.stderr, "a password in a URL must not be echoed"


def test_an_operator_sizes_the_embedded_postgres_memory_and_a_new_server_starts_with_it(tmp_path, monkeypatch):
    import psycopg

    from config import embedded

    monkeypatch.setenv("EMBEDDED_PG_SHARED_BUFFERS", "48MB")
    url = embedded.ensure_postgres(tmp_path)
    try:
        with psycopg.connect(url) as conn:
            assert conn.execute("SHOW shared_buffers").fetchone()[0] == "48MB"
    finally:
        embedded.release_postgres(tmp_path)
    assert embedded.postgres_pid(tmp_path) is None


def test_the_web_servers_event_loop_is_asyncio_unless_set_and_a_bad_choice_names_the_variable(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from config.web_server import web_server_argv

    def loop():
        argv = web_server_argv(host="127.0.0.1", port=8000, workers=1)
        return argv[argv.index("--loop") + 1]

    monkeypatch.delenv("WEB_EVENT_LOOP", raising=False)
    assert loop() == "asyncio"
    monkeypatch.setenv("WEB_EVENT_LOOP", "UVLOOP")
    assert loop() == "uvloop"
    monkeypatch.setenv("WEB_EVENT_LOOP", "tokio")
    with pytest.raises(ImproperlyConfigured, match=r"^WEB_EVENT_LOOP: expected one of asyncio, uvloop"):
        loop()
