"""Model failures a player can act on, through the real openai SDK and HTTP."""

import pytest

from stories.models import Action, ProviderCall
from stories.providers import netguard
from tests.conftest import ALICE_KEY
from tests.support.canary import Canary
from tests.support.events import parse_events, streamed
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def adventure_id(alice_plays):
    response = alice_plays.post("/api/adventures/", {"title": "T", "opening": "You wake."}, format="json")
    return response.json()["id"]


def turn(api, adventure_id, text="look around"):
    return api.post(f"/api/adventures/{adventure_id}/turns/", {"mode": "do", "text": text}, format="json")


@pytest.mark.parametrize(
    "status, attempts, code, says",
    [
        (401, 1, "bad_key", "refused the API key"),
        (404, 1, "model_not_found", "has no model 'fake-model'"),
        (500, 3, "endpoint_error", "answered 500"),  # the SDK retries 5xx twice
    ],
)
def test_a_failed_reply_keeps_the_players_action_and_says_what_to_fix(
    alice_plays, adventure_id, fake_llm, fast_provider, status, attempts, code, says
):
    fake_llm.queue(*[Reply(status=status)] * attempts)
    response = turn(alice_plays, adventure_id, "open the door")
    assert response.status_code == 424
    body = response.json()
    assert body["error"] == code and says in body["detail"]
    assert body["stored_actions"][0]["text"] == "open the door"
    assert Action.objects.filter(adventure_id=adventure_id, text="open the door").exists()
    assert ALICE_KEY not in str(body) and "sk-" not in str(body)

    # the player fixes nothing and retries: the missing reply is generated after their action
    retried = alice_plays.post(f"/api/adventures/{adventure_id}/retry/")
    assert retried.status_code == 201
    story = alice_plays.get(f"/api/adventures/{adventure_id}/story/").json()["actions"]
    assert [a["kind"] for a in story] == ["start", "do", "ai"]


def test_a_slow_model_times_out_with_a_clear_error(alice_plays, adventure_id, fake_llm, fast_provider):
    fast_provider.PROVIDER_MAX_RETRIES = 0
    fake_llm.queue(Reply(delay=2.5))
    response = turn(alice_plays, adventure_id)
    assert response.status_code == 424 and response.json()["error"] == "timeout"
    assert ProviderCall.objects.get(user=alice_plays.user).outcome == "timeout"


def test_rate_limited_then_success_is_retried_by_the_sdk(alice_plays, adventure_id, fake_llm):
    fake_llm.queue(Reply(status=429, headers={"retry-after": "0"}), Reply(text="The door creaks open."))
    response = turn(alice_plays, adventure_id)
    assert response.status_code == 201
    assert response.json()["actions"][1]["text"] == "The door creaks open."
    assert len(fake_llm.chat_requests()) == 2


def test_rate_limited_throughout_answers_429_with_retry_after(alice_plays, adventure_id, fake_llm, fast_provider):
    fake_llm.queue(*[Reply(status=429, headers={"retry-after": "0"})] * 3)
    response = turn(alice_plays, adventure_id)
    assert response.status_code == 429 and response.json()["error"] == "rate_limited"
    assert int(response["Retry-After"]) >= 1


def test_usage_is_recorded_and_the_debug_log_never_holds_a_key(alice_plays, adventure_id, fake_llm):
    ok = turn(alice_plays, adventure_id)
    assert ok.json()["usage"]["prompt_tokens"] > 0 and ok.json()["usage"]["completion_tokens"] > 0
    fake_llm.queue(Reply(status=401))
    turn(alice_plays, adventure_id)
    log = alice_plays.get("/api/debug/requests/").json()
    assert [entry["outcome"] for entry in log] == ["bad_key", "ok"]
    assert log[1]["prompt_tokens"] == ok.json()["usage"]["prompt_tokens"]
    assert ALICE_KEY not in str(log)
    assert not ProviderCall.objects.filter(error__contains="sk-").exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": []},
        {"choices": "a reply"},
        {"choices": [1]},
        {"choices": [{"message": "a reply"}]},
        {"choices": [{"message": {"content": 5}}]},
        {"choices": [{"message": {"content": ["a", "reply"]}}]},
    ],
)
def test_an_answer_not_shaped_as_openais_is_a_bad_response_for_a_turn_and_for_background_calls(
    alice_plays, adventure_id, fake_llm, body
):
    """The answer is read as sent (no model object made of it): every shape that is not OpenAI's
    is the endpoint's fault, said as such, for a turn (its action kept) and for a call made off a
    request (the settings' test: the memory pass's calls go the same way)."""
    fake_llm.queue(Reply(body=body))
    played = turn(alice_plays, adventure_id, "open the door")
    assert played.status_code == 424 and played.json()["error"] == "bad_response", played.json()
    assert [a["text"] for a in played.json()["stored_actions"]] == ["open the door"]
    fake_llm.queue(Reply(body=body))
    tested = alice_plays.post("/api/settings/test/")
    assert tested.status_code == 424 and tested.json()["error"] == "bad_response", tested.json()


def test_an_answers_extra_or_odd_fields_beside_its_text_do_not_fail_the_turn(alice_plays, adventure_id, fake_llm):
    odd = {"model": 7, "usage": "many", "choices": [{"message": {"content": "The door opens."}, "finish_reason": 3}]}
    fake_llm.queue(Reply(body=odd))
    played = turn(alice_plays, adventure_id, "open the door")
    assert played.status_code == 201, played.json()
    assert played.json()["actions"][-1]["text"] == "The door opens."
    assert played.json()["usage"]["model"] == "fake-model" and played.json()["usage"]["prompt_tokens"] == 0


def test_test_connection_reports_success_or_the_exact_problem(alice_plays, fake_llm):
    ok = alice_plays.post("/api/settings/test/")
    assert ok.status_code == 200 and ok.json()["ok"] is True and ok.json()["model"] == "fake-model"
    sent = fake_llm.chat_requests()[-1].body  # every option as the site set it, the messages whole
    assert sent["max_tokens"] == 5 and sent["model"] == "fake-model" and "temperature" in sent
    assert sent["messages"] and all(m["role"] and m["content"] for m in sent["messages"])
    fake_llm.queue(Reply(status=401))
    bad = alice_plays.post("/api/settings/test/")
    assert bad.status_code == 424 and bad.json()["error"] == "bad_key"


def test_no_model_configured_is_a_clear_error(alice_api):
    adventure = alice_api.post("/api/adventures/", {"title": "T"}, format="json").json()
    response = alice_api.post(f"/api/adventures/{adventure['id']}/turns/", {"mode": "do", "text": "hi"}, format="json")
    assert response.status_code == 424 and response.json()["error"] == "not_configured"


# ---------------------------------------------------------------------------- SSRF


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "http://localhost/v1",
        "http://10.1.2.3/v1",
        "http://169.254.169.254/latest",
        "http://[::1]:8000/v1",
        "http://0x7f.1/v1",
        "http://2130706433/v1",
        "http://0.0.0.0/v1",
        "http://[::ffff:127.0.0.1]/v1",
        "http://192.168.1.10/v1",
    ],
)
def test_hosted_site_refuses_endpoints_on_non_public_addresses(alice_api, settings, url):
    settings.ALLOW_PRIVATE_ENDPOINTS = False
    response = alice_api.patch("/api/settings/", {"endpoint_url": url, "model": "m"}, format="json")
    assert response.status_code == 400
    assert "public addresses" in response.json()["endpoint_url"][0]
    assert alice_api.get("/api/settings/").json()["endpoint_url"] == ""


@pytest.mark.parametrize(
    "url, says",
    [
        ("ftp://example.com/v1", "http:// or https://"),
        ("http://user:pw@example.com/v1", "user name or password"),
        ("file:///etc/passwd", "http:// or https://"),
    ],
)
def test_endpoint_urls_must_be_plain_http(alice_api, url, says):
    response = alice_api.patch("/api/settings/", {"endpoint_url": url}, format="json")
    assert response.status_code == 400 and says in str(response.json()["endpoint_url"])


def test_private_endpoints_are_allowed_when_the_operator_turns_it_on(alice_api, settings):
    settings.ALLOW_PRIVATE_ENDPOINTS = True
    for url in ("http://127.0.0.1:11434/v1", "http://10.0.0.5/v1", "http://[::1]:8000/v1"):
        assert alice_api.patch("/api/settings/", {"endpoint_url": url}, format="json").status_code == 200


def test_connect_time_check_refuses_an_endpoint_saved_before_the_rule(alice_plays, adventure_id, settings, fake_llm):
    settings.ALLOW_PRIVATE_ENDPOINTS = False  # the saved loopback endpoint is now forbidden
    response = turn(alice_plays, adventure_id)
    assert response.status_code == 424 and response.json()["error"] == "refused"
    assert fake_llm.chat_requests() == []


def test_a_redirect_to_loopback_is_never_followed(alice_plays, adventure_id, fake_llm):
    canary = Canary()
    try:
        fake_llm.queue(
            Reply(status=302, body={}, headers={"Location": f"http://127.0.0.1:{canary.port}/v1/chat/completions"})
        )
        response = turn(alice_plays, adventure_id)
    finally:
        canary.stop()
    assert response.status_code == 424 and response.json()["error"] == "redirect"
    assert canary.hits == 0


def test_address_rules_cover_metadata_mapped_and_reserved_forms():
    assert netguard.address_problem("169.254.169.254").startswith("a link-local")
    assert netguard.address_problem("::ffff:10.0.0.1").endswith("(inside an IPv6 address)")
    assert netguard.address_problem("240.0.0.1") in {"a reserved address", "a private-network address"}
    assert netguard.address_problem("0.0.0.0") == "an unspecified address"
    assert netguard.address_problem("100.64.0.1") is not None  # carrier-grade NAT
    assert netguard.address_problem("8.8.8.8") is None
    assert netguard.address_problem("2606:4700:4700::1111") is None


def test_an_https_endpoint_streams_over_tls_and_an_untrusted_certificate_is_a_clear_error(
    alice_api, adventure_id, monkeypatch, tmp_path
):
    from tests.support.fake_llm import FakeLLM
    from tests.support.tls import self_signed

    server_tls, trusting = self_signed(tmp_path)
    fake = FakeLLM(tls=server_tls)
    try:
        fake.reply = lambda body, n: "Lanterns sway above the quay."
        assert (
            alice_api.patch(
                "/api/settings/", {"endpoint_url": fake.url, "api_key": ALICE_KEY, "model": "fake-model"}, format="json"
            ).status_code
            == 200
        )
        refused = turn(alice_api, adventure_id, "wave")  # the site trusts public certificate authorities only
        assert refused.status_code == 424, refused.json()
        assert "certificate" in refused.json()["detail"].lower() or "tls" in refused.json()["detail"].lower()

        monkeypatch.setattr(netguard, "_tls", lambda: trusting)  # as if a public authority had signed it
        played = alice_api.post(
            f"/api/adventures/{adventure_id}/retry/", {}, format="json", HTTP_ACCEPT="text/event-stream"
        )
        assert played.status_code == 200
        events = parse_events(streamed(played))
        assert "".join(d["text"] for name, d in events if name == "token") == "Lanterns sway above the quay."
        texts = list(Action.objects.filter(adventure_id=adventure_id).order_by("depth").values_list("text", flat=True))
        assert texts[-2:] == ["wave", "Lanterns sway above the quay."], texts
        assert fake.chat_requests()[-1].body["stream"] is True
    finally:
        fake.stop()
