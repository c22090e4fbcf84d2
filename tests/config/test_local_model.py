"""The local demo model (config.local_model): its OpenAI-compatible server as the site's SDK calls
it, Gemma's chat template, and what a player reads and gets while it is getting ready. The engine
is the stand-in (the suite never builds llama.cpp); runsite's supervision of it is in
test_runsite.py, and bench/local_model.py measures the real one."""

import json
import os
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import openai
import pytest

from config import local_model, local_model_server
from tests.support.processes import free_port, wait_for


@pytest.mark.parametrize(
    "messages, prompt",
    [
        (  # the system text opens the first user turn (Gemma has no system role)
            [{"role": "system", "content": "Narrate."}, {"role": "user", "content": "> You wake."}],
            "<start_of_turn>user\nNarrate.\n\n> You wake.<end_of_turn>\n<start_of_turn>model\n",
        ),
        (  # a story so far told as the model's turn, then the player's action
            [
                {"role": "system", "content": "Narrate."},
                {"role": "assistant", "content": "Rain on the inn."},
                {"role": "user", "content": "> You knock."},
            ],
            "<start_of_turn>user\nNarrate.<end_of_turn>\n<start_of_turn>model\nRain on the inn.<end_of_turn>\n"
            "<start_of_turn>user\n> You knock.<end_of_turn>\n<start_of_turn>model\n",
        ),
        (  # two user messages in a row are one turn; a last assistant message is continued, not closed
            [
                {"role": "user", "content": "A"},
                {"role": "user", "content": [{"type": "text", "text": "B"}]},
                {"role": "assistant", "content": "The door"},
            ],
            "<start_of_turn>user\nA\n\nB<end_of_turn>\n<start_of_turn>model\nThe door",
        ),
        ([{"role": "tool", "content": "x"}, {"role": "user", "content": "  "}], "<start_of_turn>model\n"),
    ],
)
def test_the_prompt_follows_gemmas_chat_template(messages, prompt):
    assert local_model_server.gemma_prompt(messages) == prompt


class Recording(local_model_server.StandIn):
    """The stand-in, remembering what it was asked and whether a reply was cut off."""

    def __init__(self):
        self.asked, self.closed = [], threading.Event()

    def generate(self, prompt, params):
        self.asked.append((prompt, params))
        try:
            for n in range(params["max_tokens"]):
                time.sleep(0.01)
                yield f" word{n}"
        except GeneratorExit:
            self.closed.set()
            raise


@pytest.fixture
def model():
    engine = Recording()
    server = local_model_server.Server(engine, key="sk-local", context=200)
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), server.handler())
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    server.engine_ = engine
    yield server
    httpd.shutdown()
    httpd.server_close()


def _post(url, body, key="sk-local"):
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(
        url, data=data, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_the_site_sdk_reads_its_replies_streamed_and_whole_with_usage(model):
    model.ready.set()
    client = openai.OpenAI(base_url=model.url, api_key="sk-local", max_retries=0)
    assert [m.id for m in client.models.list()] == [local_model.MODEL_ID]
    whole = client.chat.completions.create(
        model=local_model.MODEL_ID,
        messages=[{"role": "system", "content": "Narrate."}, {"role": "user", "content": "> You wake."}],
        max_tokens=5,
        temperature=1.4,
        extra_body={"top_p": 0.9, "stop": ["\n\n"]},
    )
    assert whole.choices[0].message.content == " word0 word1 word2 word3 word4"
    assert whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens > 0
    prompt, params = model.engine_.asked[-1]
    assert prompt.startswith("<start_of_turn>user\nNarrate.") and params["top_p"] == 0.9 and params["stop"] == ["\n\n"]

    stream = client.chat.completions.create(
        model=local_model.MODEL_ID,
        messages=[{"role": "user", "content": "> You wake."}],
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == " word0 word1 word2"
    assert chunks[-1].usage.completion_tokens > 0


def test_a_reply_is_cut_off_when_the_player_leaves_and_the_next_one_is_answered(model):
    model.ready.set()
    client = openai.OpenAI(base_url=model.url, api_key="sk-local", max_retries=0)
    with client.chat.completions.create(
        model=local_model.MODEL_ID, messages=[{"role": "user", "content": "go"}], max_tokens=150, stream=True
    ) as stream:
        next(iter(stream))
    wait_for(model.engine_.closed.is_set, timeout=10, what="the generation to stop")
    again = client.chat.completions.create(
        model=local_model.MODEL_ID, messages=[{"role": "user", "content": "go"}], max_tokens=2
    )
    assert again.choices[0].message.content == " word0 word1"


def test_wrong_keys_bad_bodies_long_prompts_and_a_model_not_ready_get_clear_errors(model):
    chat = model.url + "/chat/completions"
    ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    status, _, doc = _post(chat, ok, key="sk-other")
    assert status == 401 and "key" in doc["error"]["message"]
    status, headers, doc = _post(chat, ok)
    assert status == 503 and "getting ready" in doc["error"]["message"] and headers["Retry-After"] == "30"
    model.ready.set()
    assert _post(chat, b"{not json")[0] == 400
    assert _post(chat, {"messages": "hi"})[2]["error"]["message"] == "send JSON with a list of messages"
    status, _, doc = _post(chat, {"messages": [{"role": "user", "content": "word " * 300}]})
    assert (
        status == 400
        and doc["error"]["code"] == "context_length_exceeded"
        and "context size" in doc["error"]["message"]
    )
    assert _post(chat, {**ok, "max_tokens": 0})[0] == 400
    assert _post(model.url + "/embeddings", ok)[0] == 404
    status, _, doc = _post(chat, ok)
    assert status == 200 and doc["choices"][0]["message"]["content"] == " word0 word1"


def test_past_the_queue_a_request_is_told_it_is_busy(model):
    model.ready.set()
    model.lock.acquire()  # one reply is being generated
    for _ in range(local_model_server.LOCAL_MODEL_QUEUE + 1):
        model.waiting.acquire()
    try:
        status, headers, doc = _post(model.url + "/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 503 and doc["error"]["code"] == "busy" and headers["Retry-After"] == "5"
    finally:
        for _ in range(local_model_server.LOCAL_MODEL_QUEUE + 1):
            model.waiting.release()
        model.lock.release()


def test_a_failed_build_is_said_and_not_tried_again_until_asked(tmp_path, monkeypatch):
    marker = local_model.state_dir(tmp_path) / "build-failed"
    marker.parent.mkdir(parents=True)
    marker.write_text("pip install exited with 1\n")
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", None)  # not installed: a build would start
    with pytest.raises(local_model_server.Failed, match="build failed.*delete .*build-failed"):
        local_model_server.Llama(512, 1).prepare(tmp_path)


def test_the_status_is_starting_when_its_process_is_gone(tmp_path):
    local_model.write_status(tmp_path, "ready")
    assert local_model.status(tmp_path)["state"] == "ready"
    doc = json.loads((local_model.state_dir(tmp_path) / "status.json").read_text())
    doc["pid"] = 2**22 + 12345  # no such process
    (local_model.state_dir(tmp_path) / "status.json").write_text(json.dumps(doc))
    assert local_model.status(tmp_path)["state"] == "starting"


# -- what a player reads and gets while it gets ready ----------------------------------------------

WAITING = "being built for this machine"


@pytest.fixture
def local_demo(settings, demo, tmp_path):
    """The demo model is the local one (as runsite sets it), its state written by "its process" (this one)."""
    settings.DEMO_LOCAL = True
    settings.DATA_DIR = tmp_path
    return lambda state, detail="": local_model.write_status(tmp_path, state, detail)


@pytest.mark.django_db
def test_pages_say_when_the_demo_model_will_play_and_the_page_asks_until_it_does(client, alice, local_demo):
    client.force_login(alice)
    local_demo("preparing")
    page = client.get("/library/").content.decode()
    assert WAITING in page and 'class="note model-notice demo-waiting"' in page and 'href="/settings/"' in page
    assert client.get("/api/settings/demo/").json()["state"] == "preparing"
    local_demo("failed", "its build failed; see build.log")
    page = client.get("/play/").content.decode()
    assert "could not start (its build failed; see build.log)" in page
    local_demo("ready")
    page = client.get("/library/").content.decode()
    assert WAITING not in page and "demo-waiting" not in page and "No model is set up" not in page
    assert client.get("/api/settings/demo/").json() == {
        "available": True,
        "local": True,
        "state": "ready",
        "message": "The site's demo model is ready.",
    }


@pytest.mark.django_db
def test_a_turn_before_it_is_ready_keeps_the_action_spends_no_demo_turn_and_plays_once_ready(
    alice_api, local_demo, settings
):
    local_demo("loading")
    aid = alice_api.post("/api/adventures/", {"title": "T", "opening": "Rain."}, format="json").json()["id"]
    turns = [
        alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I wait"}, format="json")
        for _ in range(settings.DEMO_TURNS_PER_DAY + 1)
    ]
    assert {r.status_code for r in turns} == {424}
    assert "loading; it plays in a few seconds" in turns[0].json()["detail"]
    assert "your action was kept" in turns[0].json()["hint"]
    local_demo("ready")
    played = alice_api.post(f"/api/adventures/{aid}/retry/", {}, format="json")
    assert played.status_code == 201, played.json()
    assert played.json()["usage"]["demo"] is True, "none of the refused turns was counted against the day's two"


def test_the_demo_setting_runsite_gives_its_children(monkeypatch, settings):
    from config.management.commands import runsite

    for name in (
        "DEMO_ENDPOINT_URL",
        "DEMO_MODELS",
        "DEMO_API_KEY",
        "DEMO_LOCAL",
        "LOCAL_MODEL_KEY",
        "DEMO_TURNS_PER_DAY",
    ):
        monkeypatch.setenv(name, "")  # recorded: whatever runsite sets is undone after the test
        monkeypatch.delenv(name)
    settings.DEMO_ENDPOINT_URL, settings.LOCAL_MODEL = "", "auto"
    child = runsite._local_model()
    assert child.cmd[-3:-1] == ["runmodel", "--port"]
    assert os.environ["DEMO_ENDPOINT_URL"] == f"http://127.0.0.1:{child.cmd[-1]}/v1"
    assert os.environ["DEMO_MODELS"] == local_model.MODEL_ID and os.environ["DEMO_LOCAL"] == "1"
    assert os.environ["DEMO_API_KEY"] == os.environ["LOCAL_MODEL_KEY"] and len(os.environ["DEMO_API_KEY"]) >= 24
    assert os.environ["DEMO_TURNS_PER_DAY"] == str(settings.LOCAL_MODEL_TURNS_PER_DAY)
    settings.LOCAL_MODEL = "off"
    assert runsite._local_model() is None, "LOCAL_MODEL=off leaves it out"
    settings.LOCAL_MODEL, settings.DEMO_ENDPOINT_URL = "auto", "https://models.example/v1"
    assert runsite._local_model() is None, "an operator's demo model wins"


def test_a_machine_without_a_compiler_is_told_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", None)  # not installed: a build would start
    monkeypatch.setattr(local_model_server.shutil, "which", lambda name: None)  # no c++, no g++, no apt-get
    with pytest.raises(local_model_server.Failed, match=r"needs a C\+\+ compiler: install g\+\+"):
        local_model_server.Llama(512, 1).prepare(tmp_path)
    assert local_model.status(tmp_path)["state"] == "preparing", "said while it was tried"
    assert (local_model.state_dir(tmp_path) / "build-failed").exists(), "not tried again at every restart"
