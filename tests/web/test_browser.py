"""A person plays in the browser: headless Debian chromium driven by Playwright,
against the live server, a real worker and the local fake model server."""

import shutil
from pathlib import Path

import pytest

from tests.support.processes import ROOT, Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: `make test` installs it (apt-get install chromium)"
    # Playwright's sync API runs an event loop in this thread; the test's ORM calls are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield instance
        instance.close()


@pytest.fixture
def worker():
    w = Worker(extra_env={"JOB_RETRY_BACKOFF_S": "1"}).wait_ready()
    yield w
    w.stop()


def test_a_player_plays_and_manages_memories_in_the_browser(live_server, browser, memory_llm, worker):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    url = live_server.url

    page.goto(f"{url}/accounts/signup/")
    page.fill("input[name=username]", "mira")
    page.fill("input[name=password1]", "salt-road-2026!")
    page.fill("input[name=password2]", "salt-road-2026!")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/play/")

    page.goto(f"{url}/settings/")
    page.wait_for_selector("#settings[data-loaded]")
    page.fill("input[name=endpoint_url]", memory_llm.url)
    page.fill("input[name=api_key]", "sk-mira-browser-9876")
    page.fill("input[name=model]", "fake-model")
    page.click("#settings button[type=submit]")
    page.wait_for_selector("#settings-result.ok")
    page.wait_for_selector("#key-state:has-text('Key set, ends in 9876')")
    assert "sk-mira-browser-9876" not in page.content(), "the key is write-only"

    page.goto(f"{url}/play/")
    page.fill("input[name=title]", "The Salt Road")
    page.fill("input[name=persona_name]", "Mira")
    page.fill("textarea[name=opening]", "You stand at the edge of the salt flats at dawn.")
    page.fill("input[name=card_name]", "Oren")
    page.fill("input[name=card_keys]", "Oren, innkeeper")
    page.fill("textarea[name=card_entry]", "Oren is the one-eyed innkeeper of the Last Well.")
    page.click("form.grid button[type=submit]")
    page.wait_for_selector("#story li.action")
    assert page.title() == "The Salt Road · Everlore"

    def story_length_becomes(n):
        try:
            page.wait_for_function(f"document.querySelectorAll('#story li.action').length === {n}")
        except Exception:
            raise AssertionError(f"story did not reach {n} actions; status: {page.text_content('#status')!r}") from None

    for n in range(15):
        before = page.locator("#story li.action").count()
        page.fill("#text", f"walk toward the well, step {n}")
        page.press("#text", "Enter")
        story_length_becomes(before + 2)
    assert page.locator("#story li.action").count() == 31

    page.click("#toggle-drawer")
    for _ in range(60):  # the worker writes memories in the background
        if page.locator("#bank li.memory").count():
            break
        page.wait_for_timeout(500)
        page.click("#refresh-bank")
    assert page.locator("#bank li.memory").count() >= 1
    page.locator("#bank li.memory").first.get_by_role("button", name="Pin").click()
    page.wait_for_selector("#bank li.memory.pinned")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "play-with-memory-drawer.png"), full_page=True)

    page.click("#undo")
    story_length_becomes(30)
    page.click("#retry")  # the last node is the player's: the reply is written again
    story_length_becomes(31)
    page.click("#retry")
    page.wait_for_selector("text=2 of 2")
    page.get_by_role("button", name="Previous take").click()
    page.wait_for_selector("text=1 of 2")

    main_count = page.locator("#story li.action").count()
    page.locator("#story li.action").nth(2).get_by_role("button", name="Fork here").click()
    story_length_becomes(3)
    assert page.locator("#branches option").count() == 2
    page.select_option("#branches", label=f"main ({main_count})")
    story_length_becomes(main_count)

    # the story and its cards can be changed after creation
    page.click("#toggle-world")
    page.wait_for_selector("#cards li.memory:has-text('Oren')")
    page.fill("#adventure-form input[name=authors_note]", "Keep it wistful.")
    page.click("#adventure-form button[type=submit]")
    page.wait_for_selector("#status:has-text('Story saved.')")
    page.fill("#card-form input[name=name]", "Last Well")
    page.select_option("#card-form select[name=type]", "place")
    page.fill("#card-form input[name=keys]", "well, Last Well")
    page.fill("#card-form textarea[name=entry]", "A dry well at the end of the salt road.")
    page.click("#card-form button[type=submit]")
    page.wait_for_selector("#cards li.memory:has-text('Last Well')")

    # a model error shows the provider's message and keeps the player's text
    from tests.support.fake_llm import Reply

    memory_llm.queue(Reply(status=401, when=lambda body: "narrator" in body["messages"][0]["content"]))
    page.fill("#text", "knock on the inn door")
    page.press("#text", "Enter")
    page.wait_for_selector("#status.error:has-text('refused the API key')")
    assert page.input_value("#text") == "knock on the inn door"

    page.set_viewport_size({"width": 390, "height": 800})  # a phone-width screen still works
    assert page.locator("#send").is_visible()
    page.keyboard.press("Tab")  # and the page is usable from the keyboard
    assert page.evaluate("document.activeElement.tagName") in {"A", "BUTTON", "INPUT", "SELECT", "TEXTAREA"}


@pytest.fixture
def long_road(alice):
    """An adventure with 105 memories and alice's session, made before Playwright starts (its
    greenlets would give the ORM a second database session that outlives the test)."""
    from django.test import Client

    from memory import memories
    from stories.adventures import adventure_create

    adventure = adventure_create(owner_id=alice.pk, title="Long road", opening="Dawn.")
    for n in range(105):
        memories.memory_write(adventure=adventure, text=f"Memory number {n}.")
    client = Client()
    client.force_login(alice)
    return adventure.pk, client.cookies["sessionid"].value


def test_the_memory_drawer_pages_through_a_large_bank(live_server, long_road, browser):
    adventure_id, session = long_road
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": session, "url": live_server.url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{live_server.url}/play/{adventure_id}/")
    page.click("#toggle-drawer")
    page.wait_for_selector("#bank li.memory")
    assert page.locator("#bank li.memory").count() == 100
    assert page.locator("#bank").get_by_text("Showing the newest 100 of 105 memories.").count() == 1
    page.get_by_role("button", name="Show older").click()
    page.wait_for_function("document.querySelectorAll('#bank li.memory').length === 105")
    assert page.get_by_role("button", name="Show older").count() == 0
    assert page.locator("#bank li.memory").last.inner_text().startswith("Memory number 0.")
    context.close()
