"""Hostile input never gets a 5xx: deeply nested JSON, NUL anywhere (bodies,
keys, URL path parts, query strings, MCP arguments), lone surrogates and bytes
that are not UTF-8 get a 400 that names the problem, and nothing is stored.
Every API route is swept with every such body, by every method that takes one."""

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.agents import agent_events, worlds
from memory.models import AgentMemory, World
from stories.models import Action, StoryCard
from tests.security.test_ownership import all_routes, fill, snapshot
from tests.support.examples import examples
from tests.support.mcp import session_calls

pytestmark = pytest.mark.django_db

DEEP = b"[" * 1000 + b"]" * 1000
HOSTILE_BODIES = {
    "deep nesting": (DEEP, "nested deeper than 64"),
    "deep object": (b'{"a":' * 100 + b"1" + b"}" * 100, "nested deeper than 64"),
    "NUL in a value": (b'{"text": "a\\u0000b", "metadata": {"k": "a\\u0000b"}}', "NUL"),
    "NUL in a key": (b'{"metadata": {"a\\u0000b": 1}, "text": "x"}', "NUL"),
    "lone surrogate": (b'{"text": "a\\ud800b", "title": "\\udfff"}', "surrogate"),
    "not UTF-8": (b'{"text": "\xff\xfe"}', "not valid UTF-8"),
    "NaN": (b'{"text": "x", "importance": NaN, "metadata": {"x": NaN}}', "not a finite number"),
    "Infinity": (b'{"text": "x", "metadata": {"x": [1, -Infinity]}}', "not a finite number"),
    "a number past 1e308": (b'{"text": "x", "tip_depth": 1e400}', "finite number"),
}


def test_deep_json_is_a_400_on_routes_anyone_can_reach(client):
    for url in ("/api/auth/login/", "/api/auth/signup/"):
        response = client.post(url, DEEP, content_type="application/json")
        assert response.status_code == 400, url
        assert "nested deeper than 64" in response.json()["detail"]


def test_deep_json_is_a_400_on_import_and_events(alices_world, alice_plays):
    world = alices_world["world_id"]
    for url in ("/api/adventures/import/", f"/api/worlds/{world}/events/"):
        response = alice_plays.generic("POST", url, DEEP, content_type="application/json")
        assert response.status_code == 400 and "nested" in response.json()["detail"], url


def test_nul_in_event_metadata_is_a_400_naming_where(alices_world, alice_plays):
    world = alices_world["world_id"]
    before = AgentMemory.objects.count()
    for metadata, where in (({"mood": "a\x00b"}, "metadata.mood"), ({"a\x00b": "x"}, "a key of metadata")):
        response = alice_plays.post(
            f"/api/worlds/{world}/events/",
            {"type": "say", "actor": "ann", "text": "hi", "metadata": metadata},
            format="json",
        )
        assert response.status_code == 400, response.content
        assert where in response.json()["detail"] and "NUL" in response.json()["detail"]
    assert AgentMemory.objects.count() == before


def test_nan_and_infinities_in_event_metadata_are_a_400_and_store_nothing(alices_world, alice_plays):
    """Postgres refuses NaN and infinities in a JSON column: they answered 500."""
    world = alices_world["world_id"]
    before = AgentMemory.objects.count()
    event = b'{"type": "say", "actor": "ann", "text": "hi", "metadata": %s}'
    bodies = [
        event % b'{"x": NaN}',
        event % b'{"x": Infinity}',
        event % b'{"x": -Infinity}',
        event % b'{"x": 1e400}',
        event % b'{"deep": {"list": [1, 2, {"x": NaN}]}}',
        b'{"events": [' + event % b'{"ok": 1}' + b", " + event % b'{"x": -1e999}' + b"]}",
    ]
    for body in bodies:
        response = alice_plays.generic("POST", f"/api/worlds/{world}/events/", body, content_type="application/json")
        assert response.status_code == 400, (body, response.content)
        assert "finite number" in response.json()["detail"], response.json()
    assert AgentMemory.objects.count() == before
    # finite numbers, large and small, are still numbers
    response = alice_plays.generic(
        "POST", f"/api/worlds/{world}/events/", event % b'{"x": 1.5e300, "y": -2e-300}', content_type="application/json"
    )
    assert response.status_code == 201, response.content


def test_nul_in_a_url_path_or_query_is_a_400(alices_world, alice_plays):
    world = alices_world["world_id"]
    for method, url in (
        ("get", f"/api/worlds/{world}/agents/a%00b/memories/"),
        ("delete", f"/api/worlds/{world}/agents/a%00b/"),
        ("get", f"/api/worlds/{world}/agents/ann/memories/?q=a%00b"),
        ("get", "/admin/stories/adventure/?q=a%00b"),
    ):
        response = getattr(alice_plays, method)(url)
        assert response.status_code == 400, url
        assert "NUL" in response.json()["detail"], url
    assert AgentMemory.objects.filter(agent__external_id="ann").exists()


def test_a_card_import_with_nul_is_a_400_and_stores_nothing(alices_world, alice_plays):
    aid = alices_world["adventure_id"]
    before = StoryCard.objects.count()
    response = alice_plays.post(
        f"/api/adventures/{aid}/cards/import/", [{"keys": "a,b", "value": "a\x00b", "title": "a\x00b"}], format="json"
    )
    assert response.status_code == 400 and "NUL" in response.json()["detail"]
    assert StoryCard.objects.count() == before


def test_a_custom_event_template_may_use_only_its_placeholders(alices_world, alice_plays):
    world = alices_world["world_id"]
    before = AgentMemory.objects.count()
    for template in ("{actor.__class__}", "{actor[0]}", "{text!r}", "{actor:>99999}", "{secret}", "{", "{0}"):
        response = alice_plays.post(
            f"/api/worlds/{world}/events/",
            {"type": "trade", "actor": "ann", "text": "x", "template": template},
            format="json",
        )
        assert response.status_code == 400, template
        assert "template" in response.json(), template
    assert AgentMemory.objects.count() == before
    ok = alice_plays.post(
        f"/api/worlds/{world}/events/",
        {"type": "trade", "actor": "ann", "text": "two apples", "template": "{actor} traded {text} {{at cost}}"},
        format="json",
    )
    assert ok.status_code == 201
    assert AgentMemory.objects.filter(content__endswith="ann traded two apples {at cost}").exists()


def test_every_api_route_answers_hostile_bodies_without_a_5xx(alices_world, alice_plays):
    """alice's own real ids, so the bodies reach the real handlers."""
    routes = [r for r, _ in all_routes() if r.startswith("api/") and r not in ("api/schema/", "api/docs/")]
    ids = {k: v for k, v in alices_world.items() if k != "raw_token"}
    tried = 0
    for route in routes:
        url = fill(route, ids)
        for method in ("POST", "PUT", "PATCH"):
            for name, (body, says) in HOSTILE_BODIES.items():
                response = alice_plays.generic(method, url, body, content_type="application/json")
                tried += 1
                what = f"{method} {url} with {name}"
                assert response.status_code < 500, f"{what} -> {response.status_code}"
                if response.status_code == 400 and "detail" in response.json():
                    detail = response.json()["detail"]
                    assert says in detail or "JSON" in detail, f"{what}: {detail}"
        for query in ("?q=a%00b", "?limit=%00", "?x=%ff%fe"):
            response = alice_plays.get(url + query)
            tried += 1
            assert response.status_code < 500, f"GET {url}{query} -> {response.status_code}"
    assert tried > 500
    # nothing hostile was stored anywhere
    for rows in snapshot():
        for row in rows:
            for value in row.values():
                assert not (isinstance(value, str) and ("\x00" in value or "pwned" in value))


def test_invalid_utf8_and_surrogates_get_a_400_that_says_so(alice_plays, alices_world):
    aid = alices_world["adventure_id"]
    before = Action.objects.count()
    for body, says in (
        (b'{"mode": "do", "text": "\xc3\x28"}', "not valid UTF-8"),
        (b'{"mode": "do", "text": "a\\udc00"}', "surrogate"),
    ):
        response = alice_plays.generic("POST", f"/api/adventures/{aid}/turns/", body, content_type="application/json")
        assert response.status_code == 400 and says in response.json()["detail"]
    assert Action.objects.count() == before


# ---------------------------------------------------------------------------- MCP


@pytest.fixture
def town(alice):
    world = World.objects.create(owner=alice, name="Town")
    agent_events.events_record(
        world=world, events=[agent_events.Event(type="say", actor="ann", target="bo", text="hello", nearby=["bo"])]
    )
    _, raw = worlds.token_create(world=world)
    return world, raw


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_mcp_tools_refuse_nul_and_surrogates_with_a_sentence(mcp_server, town):
    world, raw = town
    before = AgentMemory.objects.filter(world=world).count()
    calls = [
        ("remember", {"agent": "a\x00b", "content": "note"}),
        ("remember", {"agent": "ann", "content": "a\x00b"}),
        ("record_event", {"type": "say", "actor": "ann", "text": "hi\x00"}),
        ("recall", {"agent": "a\x00b", "query": "hello"}),
        ("remember", {"agent": "ann", "content": ""}),
    ]
    _, *results = asyncio.run(session_calls(mcp_server, raw, calls))
    for (name, args), result in zip(calls, results):
        assert result.is_error, (name, args)
        text = result.content[0].text
        assert "ErrorDetail" not in text and "Traceback" not in text, text
    assert "NUL" in results[0].content[0].text and "content" in results[4].content[0].text
    # A lone surrogate cannot even be encoded by the SDK; a raw client sends it as a JSON escape.
    import httpx2

    for escape in (rb'"x\ud800"', b"[" * 3000 + b"]" * 3000):
        body = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "remember", '
            b'"arguments": {"agent": "ann", "content": ' + escape + b"}}}"
        )
        response = httpx2.post(
            mcp_server,
            content=body,
            timeout=30,
            headers={
                "Authorization": f"Bearer {raw}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-06-18",
            },
        )
        assert response.status_code < 500, response.text
        assert "error" in response.json() or response.json()["result"]["isError"], response.text
    assert AgentMemory.objects.filter(world=world).count() == before


# Arguments as an agent framework might send them, hostile ones included.
texts = st.one_of(
    st.text(max_size=30, alphabet=st.characters(exclude_categories=["Cs"])),
    st.sampled_from(["", " ", "\x00", "a\x00b", "{actor.__class__}", "x" * 3000]),
)
ARGUMENTS = {
    "record_event": st.fixed_dictionaries(
        {"type": st.sampled_from(["say", "interact", "observe", "trade", "", "X"]), "actor": texts, "text": texts},
        optional={
            "target": texts,
            "location": texts,
            "nearby": st.lists(texts, max_size=60),
            "time": st.one_of(st.none(), texts),
            "importance": st.one_of(st.none(), st.floats(allow_nan=True)),
            "template": texts,
        },
    ),
    "recall": st.fixed_dictionaries(
        {"agent": st.one_of(texts, st.just("ann"))},
        optional={
            "query": texts,
            "partner": texts,
            "location": texts,
            "limit": st.integers(-5, 100),
            "token_budget": st.one_of(st.none(), st.integers(-5, 10**6)),
            "since": st.one_of(st.none(), texts),
            "kinds": st.one_of(st.none(), st.lists(texts, max_size=3)),
            "cooldown_seconds": st.one_of(st.none(), st.integers(-5, 10**6)),
        },
    ),
    "remember": st.fixed_dictionaries(
        {"agent": texts, "content": texts},
        optional={
            "partner": texts,
            "location": texts,
            "importance": st.floats(allow_nan=True, allow_infinity=True),
            "pinned": st.booleans(),
        },
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_mcp_tools_hold_up_under_fuzzing(mcp_server, town):
    """Every tool, with arguments drawn by hypothesis, answers a result or a
    plain-sentence error: never a crash, and the server keeps serving."""
    world, raw = town
    drawn = []

    @settings(
        max_examples=examples(40),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        st.lists(
            st.one_of(*[st.tuples(st.just(name), args) for name, args in ARGUMENTS.items()]), min_size=1, max_size=3
        )
    )
    def draw(calls):
        drawn.extend(calls)

    draw()
    _, *results = asyncio.run(session_calls(mcp_server, raw, drawn))
    assert len(results) == len(drawn) > 40
    for (name, args), result in zip(drawn, results):
        text = " ".join(getattr(c, "text", "") for c in result.content)
        assert "Traceback" not in text and "ErrorDetail" not in text and "Internal" not in text, (name, args, text)
        if result.is_error:
            assert text.strip(), (name, args)
    for memory in AgentMemory.objects.filter(world=world):
        assert "\x00" not in memory.content
    log = mcp_server.log()
    assert "Traceback" not in log, log[-3000:]
    # still serving
    _, last = asyncio.run(session_calls(mcp_server, raw, [("recall", {"agent": "bo", "query": "hello"})]))
    assert not last.is_error
