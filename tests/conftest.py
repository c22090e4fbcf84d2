# The MCP server fixture (a real runmcp process) for any test that asks for it.
pytest_plugins = ["tests.support.mcp"]

import importlib
from collections import Counter

import pytest
from django.db.models.signals import post_migrate
from django.dispatch import receiver


@receiver(post_migrate, dispatch_uid="tests.data_migrations_again")
def _data_migrations_again(sender, **kwargs):
    """A transactional test's flush empties every table, the data migrations' rows too (the
    Moderators group, the starter library); they are loaded again after it, as a new database has
    them, by the migrations' own (idempotent) functions. Tests run in any order (pytest-xdist)."""
    if sender.label != "workers":  # the last app: every app's permissions exist by now
        return
    from django.apps import apps

    importlib.import_module("stories.migrations.0004_moderators_group").create_group(apps, None)
    importlib.import_module("stories.migrations.0016_moderators_scenarios").permissions_add(apps, None)
    importlib.import_module("stories.migrations.0025_moderators_members").permissions_add(apps, None)
    importlib.import_module("stories.migrations.0028_story_reports").permissions_add(apps, None)
    importlib.import_module("stories.migrations.0015_starter_scenarios").load(apps, None)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and at the end of the run no session of a stopped server
    process left on it (Postgres ends a killed client's session a moment later; the database
    cannot be dropped while one lingers)."""
    yield
    with django_db_blocker.unblock():
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture(autouse=True)
def _no_rate_limits_unless_asked(settings):
    """Tests play fast; the rate-limit tests set their own limits."""
    settings.TURNS_PER_MINUTE = 0
    settings.MODEL_CALLS_PER_MINUTE = 0
    settings.WORLD_EVENTS_PER_MINUTE = 0
    settings.SIGNUPS_PER_HOUR = 0
    settings.IMPORTS_PER_HOUR = 0
    settings.WRITES_PER_MINUTE = 0
    settings.FILE_IMPORTS_PER_HOUR = 0
    settings.SCENARIO_PLAYS_PER_HOUR = 0
    settings.SHARES_PER_HOUR = 0
    settings.RECALLS_PER_MINUTE = 0
    _rate_counters_clear(settings)


def _rate_counters_clear(settings):
    """Counters (failed logins above all) from one test never block another."""
    import redis

    from stories.limits import PREFIX

    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(PREFIX + "*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-pass-123")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="bob-pass-123")


@pytest.fixture
def charlie(django_user_model):
    """A user with no access to anything of alice's or bob's."""
    return django_user_model.objects.create_user(username="charlie", password="charlie-pass-123")


@pytest.fixture
def fake_llm():
    from tests.support.fake_llm import FakeLLM

    server = FakeLLM()
    yield server
    server.stop()


ALICE_KEY = "sk-alice-SENTINEL-0001"
BOB_KEY = "sk-bob-SENTINEL-0002"


def api_client_for(user):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    client.user = user
    return client


@pytest.fixture
def alice_api(alice):
    return api_client_for(alice)


@pytest.fixture
def bob_api(bob):
    return api_client_for(bob)


@pytest.fixture
def alice_plays(alice_api, fake_llm):
    """alice with her endpoint pointed at the fake model server."""
    response = alice_api.patch(
        "/api/settings/", {"endpoint_url": fake_llm.url, "api_key": ALICE_KEY, "model": "fake-model"}, format="json"
    )
    assert response.status_code == 200, response.json()
    return alice_api


@pytest.fixture
def fast_provider(settings):
    """Short read timeout and quick retries, so failure tests stay short."""
    settings.PROVIDER_READ_TIMEOUT = 1.0
    return settings


@pytest.fixture
def memory_llm(fake_llm):
    from tests.support.story import memory_reply

    fake_llm.reply = memory_reply
    return fake_llm


@pytest.fixture
def owner(alice, memory_llm):
    """alice, whose own endpoint writes memories and summaries and embeds (bag-of-words vectors)."""
    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(
        user_id=alice.pk,
        api_key=ALICE_KEY,
        endpoint_url=memory_llm.url,
        model="fake-model",
        embedding_model="fake-embed",
    )
    return alice


@pytest.fixture
def adventure(owner):
    from stories.adventures import story_create

    return story_create(
        owner_id=owner.pk,
        title="The Salt Road",
        opening="Action 1: dawn on the flats.",
        persona_name="Mira",
        persona_pronouns="she/her",
    )


@pytest.fixture
def demo(settings, fake_llm):
    """The shared demo model on the fake server, 2 turns a day, with today's counters cleared."""
    import redis

    from stories.accounts import ai_settings

    settings.DEMO_ENDPOINT_URL = fake_llm.url
    settings.DEMO_API_KEY = "sk-demo-SENTINEL"
    settings.DEMO_MODELS = ["demo-small"]
    settings.DEMO_TURNS_PER_DAY = 2
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(ai_settings.DEMO_COUNTER_PREFIX + "*"):
        client.delete(key)
    return fake_llm


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The order the files are handed out in (make test runs xdist with --no-loadscope-reorder, so
    this is its queue): by how many tests they hold, most first (xdist's own order), but the files of
    one long test early. By count alone those went out last and ran on one worker after the others
    had finished (measured 2026-12-06: the fuzz and runsite started at 355 and 407 s of a 455 s run,
    the other two workers done at 377 and 387 s). runsite goes out a few files in, not at the start:
    with every worker making its database, the alone phase starting its servers and the fuzz, its own
    Postgres once refused its first connection. Handing every long file out first is not better: the
    browser tests, the bench smokes and the worker pools all ran at once, and on a fresh clone an
    import job went to 'retrying' (c2c7828)."""
    counts = Counter(item.path for item in items)
    position = {}
    for item in items:
        position.setdefault(item.path, len(position))
    files = sorted(counts, key=lambda path: (-counts[path], position[path]))
    named = {path.relative_to(items[0].config.rootpath).as_posix(): path for path in files} if items else {}
    for name, at in EARLY_FILES:
        if name in named:
            files.remove(named[name])
            files.insert(min(at, len(files)), named[name])
    rank = {path: i for i, path in enumerate(files)}
    items.sort(key=lambda item: rank[item.path])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that ran Celery workers shows the end of each worker's log beside its own."""
    from tests.support import processes

    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for worker in processes.STARTED:
            report.sections.append((f"worker {worker.hostname} log", worker.log()))
    if report.when == "teardown":
        processes.STARTED.clear()


# Files of one test that runs for most of a minute, and where in the queue they go
EARLY_FILES = [
    ("tests/security/test_fuzz.py", 0),
    ("tests/config/test_runsite.py", 6),
]
