"""Schemathesis fuzzes every operation of the OpenAPI schema in-process (the
real WSGI app, database and Redis), with all its checks and a bounded number of
examples per operation: no 5xx, every answer documented and matching its
schema, a request the schema allows taken and one it forbids refused. Path ids
are alice's real objects half of the time, so fuzzed bodies reach the real
handlers, and each example's writes are rolled back before the next (every one
meets the same world); outbound model calls go to the fake model server and
no name but localhost resolves (no traffic leaves the machine). The schema is
built when the test runs, not while each test worker collects the suite."""

import os
import socket
import zlib

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.db import transaction
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings

from tests.support.examples import examples

EXAMPLES = examples(12)  # per operation; keeps the whole fuzz under a minute here

# Every check runs on every operation. The one exception is "positive data acceptance"
# (a request the schema allows must not get a 400) on the few operations whose rules
# JSON Schema cannot state; each has its reason. Their 400s are tested on their own.
SCHEMA_CANNOT_SAY = {
    ("POST", "/api/auth/signup/"): "Django's password validators (common, numeric, similar to the user name)",
    ("PUT", "/api/settings/"): "the endpoint's host must resolve, and only to public addresses",
    ("PATCH", "/api/settings/"): "the endpoint's host must resolve, and only to public addresses",
    ("POST", "/api/adventures/import/"): "an export document is checked whole (its tree must be consistent)",
    ("POST", "/api/worlds/{world_id}/events/"): "an event time may not be in the far future; a template "
    "may use only the documented placeholders",
    ("POST", "/api/worlds/import/"): "a memory's time may not be in the far future; an export document is "
    "checked whole (its agents' names distinct, each link naming a memory it holds)",
    ("GET", "/api/adventures/{adventure_id}/cards/{card_id}/character/"): "only a character card leaves as a "
    "character card: the card's type is in its row, not in the request",
    ("POST", "/api/adventures/{adventure_id}/cards/proposed/{proposal_id}/accept/"): "a proposed card is made once",
    ("POST", "/api/adventures/{adventure_id}/claims/{claim_id}/accept/"): "a claim merged may not overflow its "
    "card's text",
    ("POST", "/api/auth/password/"): "Django's password validators (common, numeric, similar to the user name)",
    ("POST", "/api/settings/models/"): "the account must have an endpoint set first (a 424 says so)",
    ("POST", "/api/settings/test/"): "the account must have an endpoint set first (a 424 says so)",
    ("POST", "/api/adventures/{adventure_id}/invites/"): "an invited username must be an account's",
    ("PATCH", "/api/adventures/{adventure_id}/members/{user_id}/"): "a character must be one of the story's cards",
    ("POST", "/api/join/{code}/"): "a watcher's invite takes no character, a player's may (the invite's role is "
    "in its row)",
    ("POST", "/api/adventures/import/character/"): "the file must carry a character card (a PNG's text chunk)",
    ("POST", "/api/adventures/import/story/"): "the file must carry a story or a character card",
    ("PATCH", "/api/scenarios/{scenario_key}/"): "a scenario is published only with an opening (in its row, "
    "when the change does not send one)",
    ("POST", "/api/scenarios/{scenario_key}/play/"): "the answers name the scenario's own questions",
    ("POST", "/api/scenarios/{scenario_key}/report/"): "one's own scenario is changed, not reported",
    ("POST", "/api/adventures/{adventure_id}/cards/import/"): "another site's file: what it carries beside our "
    "fields is passed over, but no key in it may hold NUL (the schema says so with propertyNames, which the "
    "generator does not follow beside named properties)",
    ("POST", "/api/adventures/{adventure_id}/cards/import/book/"): "a lorebook in one of the formats the "
    "description names (SillyTavern, NovelAI, a character card's book, AI Dungeon's story cards)",
}
# One entry per operation, named exactly ("METHOD /path"): an entry's include-method and include-path
# would each match on their own (every POST, every method of the path).
CONFIG = {
    # NUL is generated too: the schema's text patterns say it is refused, and the API answers 400.
    # Unknown query parameters are ignored, as HTTP APIs do, so none are sent to test that.
    "generation": {"allow-x00": True, "allow-extra-parameters": False},
    # The coverage phase (every boundary case each schema defines: ~60 requests an operation, ~100 s
    # of a core) runs in `make fuzz`; the suite sends each operation its examples.
    "phases": {"coverage": {"enabled": os.environ.get("EVERLORE_FUZZ_COVERAGE") == "1"}},
    "operations": [
        {"include-name": f"{method} {path}", "checks": {"positive_data_acceptance": {"enabled": False}}}
        for method, path in SCHEMA_CANNOT_SAY
    ],
}


@pytest.fixture
def api_schema(request):
    """The schema, built when the fuzz runs (not while every test worker collects the suite: building
    every operation's cases then cost each worker ~7 s of a core)."""
    if not hasattr(request.node, "_nodeid"):  # schemathesis names each operation's run through it
        request.node._nodeid = request.node.nodeid
    return schema_now()


def schema_now():
    """The site's OpenAPI schema as schemathesis reads it, with CONFIG, served in-process."""
    raw = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(raw, config=schemathesis.Config.from_dict(CONFIG))
    schema.app = WSGIHandler()
    schema.location = "/api/schema/"
    return schema


# A live stream ends only when its reader leaves; in-process (WSGI) Django reads an async stream whole
# before answering, so it would never answer here. The live route is played over the real server
# (tests/stories/test_live*.py), its events read as a page reads them.
schema = schemathesis.pytest.from_fixture("api_schema").exclude(name="GET /api/adventures/{adventure_id}/live/")


CURRENT = {}  # alice's user, while the fuzzing test runs


@schema.auth(refresh_interval=None)
class AliceToken:
    """alice's API token, looked up for every call (a fuzzed logout deletes it)."""

    def get(self, case, context):
        return "alice"

    def set(self, case, data, context):
        from rest_framework.authtoken.models import Token

        token, _ = Token.objects.get_or_create(user=CURRENT["user"])
        case.headers = {**(case.headers or {}), "Authorization": f"Token {token.key}"}


@pytest.fixture
def local_dns_only(monkeypatch):
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host not in ("localhost", "127.0.0.1", "::1"):
            raise socket.gaierror(socket.EAI_NONAME, "fuzzing resolves only localhost")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def fuzz_world(alices_world, alice, settings, local_dns_only):
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    settings.ALLOW_PRIVATE_ENDPOINTS = True  # the fake model server is on loopback
    # As Django's test client does: the test's transaction outlives each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    CURRENT["user"] = alice
    yield alices_world
    CURRENT.clear()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.slow  # every operation's examples: ~1,500 requests
@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
def test_the_api_holds_up_under_fuzzing(case, fuzz_world):
    # Half the examples (chosen by a stable hash, so the run stays derandomized) use alice's real ids.
    if case.path_parameters and zlib.crc32(repr(case.body).encode()) % 2 == 0:
        for name in case.path_parameters:
            key = "agent_memory_id" if name == "memory_id" and "/agents/" in case.path else name
            if key in fuzz_world:
                case.path_parameters[name] = fuzz_world[key]
    # Every example starts from alice's same world, her endpoint the fake model's: what one wrote (a
    # deleted story, a moved endpoint) is rolled back before the next.
    with transaction.atomic():
        try:
            case.call_and_validate()
        finally:
            transaction.set_rollback(True)
