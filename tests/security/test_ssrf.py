"""Outbound requests on a hosted site: every spelling of a loopback address,
and a DNS answer that changes between check and connect, is refused at save
time and at connect time, and a canary listener on that address receives
nothing. Each form is first shown to reach the canary when private endpoints
are allowed, so a refusal here is the guard's doing."""

import socket

import pytest

from stories.models import AISettings
from stories.providers import netguard
from tests.support.canary import Canary

pytestmark = pytest.mark.django_db

LOOPBACK_FORMS = {
    "dotted": "127.0.0.1",
    "short": "127.1",
    "decimal": "2130706433",
    "hex": "0x7f000001",
    "hex-dotted": "0x7f.0.0.1",
    "unspecified": "0.0.0.0",
    "ipv4-mapped-ipv6": "[::ffff:127.0.0.1]",
    "ipv4-mapped-ipv6-hex": "[::ffff:7f00:1]",
    "name": "localhost",
}


@pytest.fixture
def adventure_id(alice_api):
    return alice_api.post("/api/adventures/", {"title": "T", "opening": "You wake."}, format="json").json()["id"]


def turn(api, adventure_id):
    return api.post(f"/api/adventures/{adventure_id}/turns/", {"mode": "do", "text": "look"}, format="json")


def save_endpoint(api, url):
    return api.patch("/api/settings/", {"endpoint_url": url, "api_key": "sk-test", "model": "m"}, format="json")


@pytest.mark.parametrize("form", LOOPBACK_FORMS, ids=list(LOOPBACK_FORMS))
def test_every_spelling_of_loopback_is_refused_at_save_and_at_connect(
    alice_api, adventure_id, settings, form, fast_provider
):
    with Canary() as canary:
        url = f"http://{LOOPBACK_FORMS[form]}:{canary.port}/v1"
        # Allowed (one-machine mode): this spelling really does reach the canary.
        settings.ALLOW_PRIVATE_ENDPOINTS = True
        assert save_endpoint(alice_api, url).status_code == 200
        assert turn(alice_api, adventure_id).status_code == 424
        reached = canary.hits
        assert reached >= 1, f"{url} should reach the canary when private endpoints are allowed"

        # Hosted: refused when saved (the stored URL is kept), and refused at connect time for the
        # URL saved earlier, before a single byte is sent.
        settings.ALLOW_PRIVATE_ENDPOINTS = False
        refused = save_endpoint(alice_api, url.replace("/v1", "/v2"))
        assert refused.status_code == 400 and "public addresses" in str(refused.json()["endpoint_url"])
        assert AISettings.objects.get(user__username="alice").endpoint_url == url
        response = turn(alice_api, adventure_id)
        assert response.status_code == 424 and response.json()["error"] == "refused"
        assert canary.hits == reached


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/v1",
        "http://240.0.0.1/v1",
        "http://[::]/v1",
        "http://100.64.0.1/v1",
        "http://[64:ff9b::7f00:1]/v1",
        "http://[2002:7f00:1::]/v1",
        "http://0/v1",
        "http://017700000001/v1",
    ],
)
def test_metadata_reserved_and_embedded_forms_are_refused_when_saved(alice_api, settings, url):
    settings.ALLOW_PRIVATE_ENDPOINTS = False
    response = save_endpoint(alice_api, url)
    assert response.status_code == 400, url
    assert "public addresses" in str(response.json()["endpoint_url"])


@pytest.mark.parametrize("allow_private", [True, False])
def test_an_octal_address_is_refused_whatever_the_mode(alice_api, settings, allow_private):
    """The resolver reads 0177.0.0.1 as 127.0.0.1; the HTTP client refuses it, so it is never saved."""
    settings.ALLOW_PRIVATE_ENDPOINTS = allow_private
    response = save_endpoint(alice_api, "http://0177.0.0.1:8080/v1")
    assert response.status_code == 400
    says = str(response.json()["endpoint_url"])
    assert "malformed" in says or "public addresses" in says
    assert alice_api.get("/api/settings/").json()["endpoint_url"] == ""


@pytest.fixture
def rebinding_dns(monkeypatch):
    """``rebind.test`` answers from a script of addresses, one per lookup; other names resolve normally."""
    real = socket.getaddrinfo
    script = {"answers": [], "lookups": 0}

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        answers = script["answers"]
        ip = answers[min(script["lookups"], len(answers) - 1)]
        script["lookups"] += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return script


def test_a_dns_answer_that_turns_private_after_the_save_is_refused_at_connect(
    alice_api, adventure_id, settings, rebinding_dns
):
    settings.ALLOW_PRIVATE_ENDPOINTS = False
    with Canary() as canary:
        # Public when saved (nothing is sent then), loopback from the next lookup on.
        rebinding_dns["answers"] = ["93.184.215.14", "127.0.0.1"]
        assert save_endpoint(alice_api, f"http://rebind.test:{canary.port}/v1").status_code == 200
        response = turn(alice_api, adventure_id)
    assert response.status_code == 424 and response.json()["error"] == "refused"
    assert "loopback" in response.json()["detail"]
    assert canary.hits == 0


def test_a_connection_goes_to_the_address_that_was_checked(
    alice_api, adventure_id, settings, rebinding_dns, monkeypatch, fast_provider
):
    """The answer flips on every lookup: checked-then-resolved-again would land on the canary."""
    settings.ALLOW_PRIVATE_ENDPOINTS = False
    real_problem = netguard.address_problem
    # 127.0.0.2 stands in for a public server (no traffic may leave this machine).
    monkeypatch.setattr(netguard, "address_problem", lambda ip: None if ip == "127.0.0.2" else real_problem(ip))
    with Canary("127.0.0.1") as canary, Canary("127.0.0.2", canary.port) as public:
        rebinding_dns["answers"] = ["127.0.0.2"]
        assert save_endpoint(alice_api, f"http://rebind.test:{canary.port}/v1").status_code == 200
        rebinding_dns["answers"] = ["127.0.0.2", "127.0.0.1"] * 20
        rebinding_dns["lookups"] = 0
        response = turn(alice_api, adventure_id)
    assert response.status_code == 424  # the stand-in hangs up; the point is where the bytes went
    assert public.hits >= 1
    assert canary.hits == 0
