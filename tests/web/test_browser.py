"""A person plays in the browser: headless Debian chromium driven by Playwright,
against the real server (uvicorn, as `make run` serves the site, one per module), a
real worker and the local fake model server."""

import json
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.support.processes import ROOT, Site, Worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# the photographs a run takes (looked at after a change; docs/screens holds copies of those the
# README and docs show, copied by hand: a test run never changes a tracked file)
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: `make test` installs it (apt-get install chromium)"
    # Playwright's sync API runs an event loop in this thread; the test's ORM calls are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        instance = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def site(django_db_setup, django_db_blocker, tmp_path_factory):
    """The site as players get it: config.web_server's uvicorn on the test database (what a test
    writes is committed: these tests run in transactions of their own)."""
    server = Site(tmp_path_factory.mktemp("site"))
    yield server
    server.stop()
    with django_db_blocker.unblock():
        server.wait_disconnected()


@pytest.fixture
def worker():
    w = Worker(extra_env={"JOB_RETRY_BACKOFF_S": "1"}).wait_ready()
    yield w
    w.stop()


def watch_csp(page) -> list[str]:
    """Every Content-Security-Policy violation the page reports (console and event)."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.error('Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
    )
    return seen


def test_a_player_plays_and_manages_memories_in_the_browser(site, browser, memory_llm, worker):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    violations = watch_csp(page)
    page.set_default_timeout(20_000)
    url = site.url

    page.goto(f"{url}/accounts/signup/")
    page.fill("input[name=username]", "mira")
    page.fill("input[name=password1]", "salt-road-2026!")
    page.fill("input[name=password2]", "salt-road-2026!")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/library/")  # a newcomer starts at the library

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
            # a locator wait, not wait_for_function: that one evaluates a string, which the CSP forbids
            expect(page.locator("#story li.action")).to_have_count(n)
        except Exception:
            raise AssertionError(
                f"story did not reach {n} actions; status: {page.text_content('#status')!r}; {violations}"
            ) from None

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

    page.click("#undo")  # the whole turn: the player's action and its reply
    story_length_becomes(29)
    page.click("#redo")  # both back
    story_length_becomes(31)
    page.click("#retry")  # another take of the newest reply
    page.wait_for_selector("text=2 of 2")
    page.get_by_role("button", name="Previous take").click()
    page.wait_for_selector("text=1 of 2")

    main_count = page.locator("#story li.action").count()
    third = page.locator("#story li.action").nth(2)
    third.locator("summary").click()  # the passage's menu
    third.get_by_role("button", name="Fork here").click()
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
    page.click("#card-form .card-rules summary")  # World Info's rules, as a SillyTavern player sets them
    page.fill("#card-form input[name=secondary_keys]", "night")
    page.select_option("#card-form select[name=position]", "at_depth")
    page.fill("#card-form input[name=depth]", "2")
    page.fill("#card-form input[name=probability]", "50")
    page.click("#card-form button[type=submit]")
    page.wait_for_selector("#cards li.memory:has-text('Last Well')")
    well = page.locator("#cards li.memory", has=page.locator("strong", has_text="Last Well"))
    flags = well.locator(".flags").text_content()
    assert "and any of: night" in flags and "told 2 actions from the newest" in flags and "50 % of turns" in flags

    # a model error shows the provider's message; the action is kept in the story, the box is
    # cleared and Retry is offered; sending the same text again uses the kept action, never a second
    from tests.support.fake_llm import Reply

    memory_llm.queue(Reply(status=401, when=lambda body: "narrator" in body["messages"][0]["content"]))
    page.fill("#text", "knock on the inn door")
    page.press("#text", "Enter")
    page.wait_for_selector("#status.error:has-text('refused the API key')")
    assert "kept in the story: press Retry" in page.text_content("#status")
    assert page.input_value("#text") == ""
    page.wait_for_selector("#story li:has-text('knock on the inn door')")
    page.fill("#text", "knock on the inn door")
    page.press("#text", "Enter")
    page.wait_for_selector("#story li.reply:last-child, #story li.kind-ai:last-child")
    page.wait_for_function("() => !document.querySelector('#story li.pending')")
    assert page.locator("#story li:has-text('knock on the inn door')").count() == 1, "the action is in the story once"
    # undo takes back the whole turn (the action and its reply); redo brings both back
    replies = page.locator("#story li.kind-ai").count()
    # a load of the story answered before the undo but arriving after it (the live stream's news on a
    # slow network) never draws the undone turn back: its answer is held in the page until then
    page.evaluate("""() => new Promise((answered) => {
      const real = window.fetch;
      let open;
      const gate = new Promise((resolve) => { open = resolve; });
      window.openGate = open;
      window.fetch = async (url, options) => {
        window.fetch = real;
        const response = await real(url, options);
        answered();
        await gate;
        return response;
      };
      window.staleLoad = loadStory();
    })""")
    page.click("#undo")
    expect(page.locator("#story li:has-text('knock on the inn door')")).to_have_count(0)
    page.evaluate("() => { window.openGate(); return window.staleLoad; }")
    expect(page.locator("#story li:has-text('knock on the inn door')")).to_have_count(0)
    assert page.locator("#story li.kind-ai").count() == replies - 1
    page.click("#redo")
    expect(page.locator("#story li:has-text('knock on the inn door')")).to_have_count(1)
    expect(page.locator("#story li.kind-ai")).to_have_count(replies)

    page.set_viewport_size({"width": 390, "height": 800})  # a phone-width screen still works
    assert page.locator("#send").is_visible()
    page.keyboard.press("Tab")  # and the page is usable from the keyboard
    assert page.locator(":focus").evaluate("e => e.tagName") in {
        "A",
        "BUTTON",
        "INPUT",
        "SELECT",
        "TEXTAREA",
        "SUMMARY",
    }
    assert violations == [], "the play and settings pages work under the CSP"


def open_play_page(browser, base_url: str, session: str, adventure_id: int):
    """A browser context logged in with ``session`` on the play page of ``adventure_id``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": session, "url": base_url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{base_url}/play/{adventure_id}/")
    return context, page


def session_of(user) -> str:
    """A logged-in session id for ``user`` (made before Playwright starts, as the fixtures are)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def long_road(alice):
    """An adventure with 105 memories and alice's session, made before Playwright starts (its
    greenlets would give the ORM a second database session that outlives the test)."""
    from memory.story import memories
    from stories.adventures import story_create

    adventure = story_create(owner_id=alice.pk, title="Long road", opening="Dawn.")
    for n in range(105):
        memories.memory_write(adventure=adventure, text=f"Memory number {n}.")
    return adventure.pk, session_of(alice)


def test_the_memory_drawer_pages_through_a_large_bank(site, long_road, browser):
    adventure_id, session = long_road
    context, page = open_play_page(browser, site.url, session, adventure_id)
    page.click("#toggle-drawer")
    page.wait_for_selector("#bank li.memory")
    assert page.locator("#bank li.memory").count() == 100
    assert page.locator("#bank").get_by_text("Showing the newest 100 of 105 memories.").count() == 1
    page.get_by_role("button", name="Show older").click()
    expect(page.locator("#bank li.memory")).to_have_count(105)
    assert page.get_by_role("button", name="Show older").count() == 0
    assert page.locator("#bank li.memory").last.inner_text().startswith("Memory number 0.")
    context.close()


@pytest.fixture
def road_of_320(alice):
    """A 320-action story (a hooded stranger at milestone 77) and alice's session."""
    from stories.adventures import story_create
    from stories.tree import writes

    adventure = story_create(owner_id=alice.pk, title="Road of 320", opening="The road begins at the river.")
    for n in range(2, 321):
        kind, text = ("do", f"walk on past milestone {n}") if n % 2 == 0 else ("story", f"Milestone {n} is mossy.")
        if n == 77:
            text = "A hooded stranger hides a silver key under milestone 77."
        writes.place(
            adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text, ask_pass=False
        )
    return adventure.pk, session_of(alice)


def test_a_long_story_reads_back_to_its_opening_and_a_search_jumps_to_a_passage(site, road_of_320, browser):
    adventure_id, session = road_of_320
    context, page = open_play_page(browser, site.url, session, adventure_id)
    expect(page.locator("#story li.action")).to_have_count(200)
    page.locator("#story").evaluate("list => { list.scrollTop = 0; }")  # scrolled to the top: the rest loads
    expect(page.locator("#story li.action")).to_have_count(320)
    assert page.locator("#story li.action").first.inner_text().startswith("The road begins at the river.")
    assert page.locator("#load-earlier").count() == 0

    page.reload()
    expect(page.locator("#story li.action")).to_have_count(200)
    page.fill("#search-text", "hooded stranger")
    page.press("#search-text", "Enter")
    hit = page.locator("#search-results li button")
    expect(hit).to_have_count(1)
    assert "Action 77" in hit.inner_text() and page.locator("#search-results mark").count() == 2
    hit.click()
    expect(page.locator('#story li[data-depth="77"]')).to_be_in_viewport()
    assert page.locator("a", has_text="Markdown").get_attribute("href").endswith("/story/export/?type=markdown")
    context.close()


def test_on_a_phone_the_game_stays_on_screen_and_every_control_is_a_tap_target(site, road_of_320, browser):
    adventure_id, session = road_of_320
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark", has_touch=True)
    context.add_cookies([{"name": "sessionid", "value": session, "url": site.url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{site.url}/play/{adventure_id}/")
    expect(page.locator("#story li.action")).to_have_count(200)

    def on_screen(selector):
        box = page.locator(selector).bounding_box()
        return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 844

    assert on_screen("#text") and on_screen("#send"), "the input is on screen with 200 actions above it"
    assert page.evaluate("document.scrollingElement.scrollHeight <= window.innerHeight + 1"), "one scroll area"
    small = page.evaluate(
        """() => [...document.querySelectorAll('.turn button, .toolbar button, .toolbar select, #story summary')]
        .filter((e) => e.offsetParent !== null)
        .map((e) => [e.id || e.textContent.trim(), e.getBoundingClientRect()])
        .filter(([, r]) => r.height < 44 || r.width < 44).map(([name]) => name)"""
    )
    assert small == [], f"controls smaller than 44 px: {small}"

    page.click("#toggle-drawer")
    page.click("#toggle-insights")  # one panel at a time, over the story
    assert page.locator("#drawer").is_hidden() and page.locator("#insights").is_visible()
    assert on_screen("#text"), "the input stays on screen under an open panel"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "phone-insights-dark.png"))
    page.click("#toggle-insights")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(21, 23, 27)", "the dark theme"
    page.screenshot(path=str(ARTIFACTS / "phone-story-dark.png"))
    context.close()


@pytest.fixture
def newcomer(alice):
    return session_of(alice)


def test_a_sillytavern_card_and_a_lorebook_come_in_through_the_page(site, newcomer, browser):
    from tests.stories.test_field_formats import MAREN_V2, png

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": newcomer, "url": site.url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{site.url}/play/")
    page.set_input_files("#card-file", {"name": "maren.png", "mimeType": "image/png", "buffer": png(chara=MAREN_V2)})
    page.fill("#card-persona", "Wren")  # the card calls the player {{user}}: the page asks a name
    # and it has two greetings: the page offers them, its first message chosen unless the player picks another
    assert page.locator("#card-result .greeting").count() == 2
    assert "Maren is asleep at her desk." in page.text_content("#card-result .greetings")
    page.click("#card-result button[type=submit]")
    page.wait_for_selector("#card-result a:has-text('Maren')")
    assert "carried: Maren's example dialogue" in page.text_content("#card-result")
    page.click("#card-result a")
    page.wait_for_selector("#story li.action:has-text('Maren lifts her lantern')")
    greeting = page.locator("#story li.action").first
    assert greeting.locator("em").first.text_content() == "Maren lifts her lantern.", "*actions* in italics"
    assert "sent for, Wren." in greeting.text_content() and "*" not in greeting.text_content()
    page.click("#toggle-world")
    book = {"entries": {"0": {"key": ["ferry"], "comment": "The ferry", "content": "It sails at dusk."}}}
    page.set_input_files(
        "#book-file", {"name": "vell.json", "mimeType": "application/json", "buffer": json.dumps(book).encode()}
    )
    page.wait_for_selector("#book-result:has-text('1 cards came in')")
    page.wait_for_selector("#cards li:has-text('The ferry')")
    # the character leaves as a SillyTavern card: the link the page shows is the card's file
    href = page.get_attribute("#cards li:has-text('Maren') a.card-export", "href")
    fetched = page.evaluate(
        """async (href) => { const r = await fetch(href, {credentials: "same-origin"});
           const bytes = new Uint8Array(await r.arrayBuffer());
           return {status: r.status, type: r.headers.get("content-type"), body: Array.from(bytes)}; }""",
        href,
    )
    assert (fetched["status"], fetched["type"]) == (200, "image/png"), (href, bytes(fetched["body"])[:300])
    from stories.library.lorebooks import png_card

    card = png_card(bytes(fetched["body"]))
    # a card's history: never changed yet, then changed here (its version made at this passage stands)
    maren = page.locator("#cards li.memory", has=page.locator("strong", has_text="Maren"))
    maren.locator("button:has-text('History')").click()
    page.wait_for_selector("#cards .card-history:has-text('Never changed since the story began')")
    maren.locator("button:has-text('Edit')").click()
    page.fill("#card-form textarea[name=entry]", "Quiet, watchful; she hides a key.")
    page.click("#card-form button[type=submit]")
    page.wait_for_selector("#cards li.memory:has-text('she hides a key')")
    maren = page.locator("#cards li.memory", has=page.locator("strong", has_text="Maren"))
    maren.locator("button:has-text('History')").click()
    page.wait_for_selector("#cards .card-history li:has-text('stands here')")
    assert maren.locator(".card-history li").count() == 2
    assert card["spec"] == "chara_card_v3" and card["data"]["name"] == "Maren"
    assert card["data"]["mes_example"] == "<START>\nMaren: The sea gives nothing back."
    context.close()


@pytest.fixture
def hall_of_tarn(alice):
    """An adventure whose cast holds Cora, with a memory of the story's own and two of Cora's."""
    from memory.story import memories
    from stories.adventures import story_create
    from stories.models import StoryCard

    adventure = story_create(owner_id=alice.pk, title="Hall of Tarn", opening="Dawn in the hall.")
    cora = StoryCard.objects.create(adventure=adventure, type="character", name="Cora", entry="A servant.")
    memories.memory_write(adventure=adventure, text="Mira reached the hall of Tarn.")
    memories.memory_write(adventure=adventure, text="Cora saw Aria hide the crown.", character=cora)
    memories.memory_write(adventure=adventure, text="Cora swept the great hall.", character=cora)
    return adventure.pk, session_of(alice)


def test_the_memory_drawer_shows_and_steers_each_characters_memories(site, hall_of_tarn, browser):
    adventure_id, session = hall_of_tarn
    context, page = open_play_page(browser, site.url, session, adventure_id)
    page.click("#toggle-drawer")
    expect(page.locator("#bank li.memory")).to_have_count(1)
    assert "Mira reached the hall" in page.locator("#bank").inner_text()
    page.select_option("#whose", label="Cora (2)")
    expect(page.locator("#bank li.memory")).to_have_count(2)
    assert "Cora saw Aria hide the crown." in page.locator("#bank").inner_text()
    assert "Mira reached" not in page.locator("#bank").inner_text()
    page.locator("#bank li.memory", has_text="hide the crown").get_by_role("button", name="Pin").click()
    expect(page.locator("#bank li.memory.pinned")).to_have_count(1)
    page.fill("#memory-text", "Cora fears the crypt.")
    page.click("#new-memory button[type=submit]")
    expect(page.locator("#bank li.memory")).to_have_count(3)
    assert page.locator("#whose option:checked").inner_text() == "Cora (3)"
    context.close()


@pytest.fixture
def staff_session(alice, django_user_model):
    """alice's adventure and a superuser's session, made before Playwright starts."""
    from stories.adventures import story_create

    adventure = story_create(owner_id=alice.pk, title="Harbor", opening="You arrive.")
    root = django_user_model.objects.create_superuser(username="root", password="root-pass-123")
    return adventure.pk, session_of(root)


def test_the_admin_the_api_docs_and_the_login_pages_work_under_the_csp(site, staff_session, browser):
    adventure_id, session = staff_session
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    violations = watch_csp(page)
    url = site.url
    for path in ("/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"):
        response = page.goto(url + path)
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_selector("form button[type=submit]")
    context.add_cookies([{"name": "sessionid", "value": session, "url": url}])
    page.goto(f"{url}/admin/stories/adventure/")
    page.check("#action-toggle")  # the admin's own script runs: it selects every row
    page.wait_for_selector(".action-counter:has-text('1 of 1 selected')")
    page.goto(f"{url}/admin/stories/adventure/{adventure_id}/change/")
    page.wait_for_selector("#adventure_form")
    page.goto(f"{url}/api/docs/")
    page.wait_for_selector("#swagger-ui .info .title:has-text('Everlore API')")
    page.wait_for_selector("#swagger-ui .opblock-tag")
    assert violations == []
    context.close()


@pytest.fixture
def failing_embeddings(alice, fake_llm):
    """alice's adventure on the fake model, whose embedding endpoint refuses the key, and her session."""
    from stories.accounts import ai_settings
    from stories.adventures import story_create
    from tests.support.fake_llm import Reply

    ai_settings.ai_settings_update(
        user_id=alice.pk,
        endpoint_url=fake_llm.url,
        api_key="sk-alice-browser",
        model="fake-model",
        embedding_model="fake-embed",
    )
    adventure = story_create(owner_id=alice.pk, title="Fog", opening="The fog rolls in.")
    for _ in range(2):
        fake_llm.queue(Reply(status=401, when=lambda body: "input" in body))
    return adventure.pk, session_of(alice)


def test_the_play_page_says_when_recall_fell_back_to_pinned_memories(site, failing_embeddings, browser):
    adventure_id, session = failing_embeddings
    context, page = open_play_page(browser, site.url, session, adventure_id)
    page.fill("#text", "listen")
    page.press("#text", "Enter")
    page.wait_for_selector("#status:has-text('only pinned memories were used')")
    assert "embedding model failed" in page.text_content("#status")
    page.click("#toggle-insights")
    page.wait_for_selector("#parts li.warn:has-text('only pinned memories were used')")
    # the next prompt against the last one sent: what a model server's prefix cache can serve
    page.wait_for_selector("#prefix-reused:has-text('of the last prompt sent')")
    # each part's exact text, a click away, for the next turn and for the last one sent
    page.click("#parts li.part-story summary")
    assert "listen" in page.text_content("#parts li.part-story pre")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "play-insights.png"))
    page.click("#insights-last")
    page.wait_for_selector("#parts li.muted:has-text('sent')")
    page.click("#parts li.part-instructions summary")
    assert "narrator" in page.text_content("#parts li.part-instructions pre")
    context.close()


@pytest.fixture
def streaming_site(site, alice, fake_llm):
    """The real server (uvicorn, as `make run` serves the site), alice's adventure with her
    endpoint on a fake model that writes slowly, and her session; made before Playwright starts."""

    from stories.accounts import ai_settings
    from stories.adventures import story_create

    ai_settings.ai_settings_update(
        user_id=alice.pk, api_key="sk-alice-stream-0001", endpoint_url=fake_llm.url, model="fake-model"
    )
    adventure = story_create(owner_id=alice.pk, title="Lighthouse", opening="The lamp is dark.")
    return site, adventure.pk, session_of(alice)


def test_the_play_page_shows_the_reply_as_it_is_written_and_stop_keeps_what_was_written(
    streaming_site, browser, fake_llm
):
    site, adventure_id, session = streaming_site
    fake_llm.stream_delay = 0.25
    fake_llm.reply = lambda body, n: (
        "The keeper climbs the stairs one by one and lights the great lamp, "
        "and far out at sea a ship turns toward the light."
    )
    context, page = open_play_page(browser, site.url, session, adventure_id)
    page.wait_for_selector("#story li.action")

    page.fill("#text", "light the lamp")
    page.press("#text", "Enter")
    writing = page.locator("#story li.pending.reply")
    expect(writing).to_contain_text("The keeper climbs")  # text arrives before the reply is complete
    assert "toward the light" not in writing.inner_text()
    assert page.locator("#stop").is_visible()
    expect(page.locator("#story li.pending")).to_have_count(0, timeout=20_000)  # the reply is whole and stored
    expect(page.locator("#story li.action")).to_have_count(3)
    assert page.locator("#story li.action p.text").last.inner_text().endswith("turns toward the light.")
    assert page.locator("#stop").is_hidden()

    page.fill("#text", "watch the ship")
    page.press("#text", "Enter")
    expect(writing).to_contain_text("stairs one")
    page.click("#stop")
    expect(page.locator("#status")).to_have_text("Stopped. The text written so far is kept.")
    expect(page.locator("#story li.pending")).to_have_count(0)  # the story as stored
    expect(page.locator("#story li.action")).to_have_count(5)
    kept = page.locator("#story li.action p.text").last.inner_text()
    assert kept.startswith("The keeper climbs the stairs one") and "toward the light" not in kept
    wait_for(lambda: fake_llm.streams_cut == 1, timeout=20, what="the model call to be cut")
    # what the server stored, asked through the API (an ORM query here would open a second
    # database session in Playwright's greenlet that outlives the test)
    story = page.request.get(f"{site.url}/api/adventures/{adventure_id}/story/").json()
    assert story["actions"][-1]["text"] == kept, "the page shows exactly what was kept"
    assert [a["text"] for a in story["actions"]][-2:] == ["watch the ship", kept]
    context.close()


def test_a_large_import_shows_its_progress_and_opens_the_adventure_when_done(site, alice, browser, worker, tmp_path):
    """The file is too large to import while the request waits: the page follows the job (what it
    is doing, with counts) and opens the new adventure when the worker is done."""
    import json

    from tests.stories.test_import_jobs import document

    session = session_of(alice)
    path = tmp_path / "long-road.json"
    path.write_text(json.dumps(document(6000, title="Six thousand steps")))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": session, "url": site.url}])
    page = context.new_page()
    violations = watch_csp(page)
    page.set_default_timeout(60_000)
    page.goto(f"{site.url}/play/")
    page.set_input_files("#import-file", str(path))
    expect(page.locator("#import-result")).to_contain_text('"Six thousand steps": ')
    page.wait_for_url(f"{site.url}/play/*/")
    expect(page.locator("body")).to_contain_text("Step 6000: you walk on along the river")
    assert violations == []
    context.close()


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_ten_turns_keep_the_box_and_send_on_screen_at_desktop_and_phone_sizes(
    site, alice, browser, fake_llm, width, height
):
    """The story is the one scroll area: after every turn the turn box and Send are on screen, the
    page itself never scrolled away from them, and Redo is on only after an Undo."""
    from stories.accounts import ai_settings
    from stories.adventures import story_create

    ai_settings.ai_settings_update(user_id=alice.pk, endpoint_url=fake_llm.url, model="fake-model")
    fake_llm.reply = lambda body, n: "The lanterns sway. " * 40 + f"(reply {n})"
    adventure = story_create(owner_id=alice.pk, title="Lantern road", opening="*The road is dark.* You walk.")
    context = browser.new_context(viewport={"width": width, "height": height}, has_touch=width < 700)
    context.add_cookies([{"name": "sessionid", "value": session_of(alice), "url": site.url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{site.url}/play/{adventure.pk}/")
    page.wait_for_selector("#story li.action")

    def on_screen(selector):
        box = page.locator(selector).bounding_box()
        return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height

    assert page.locator("#redo").is_disabled(), "nothing to redo on a new story"
    for n in range(10):
        page.fill("#text", f"I lift my lantern and look ahead ({n})")
        page.click("#send")
        expect(page.locator("#story li.action")).to_have_count(1 + 2 * (n + 1))
        assert on_screen("#text") and on_screen("#send"), f"turn {n + 1}: the box left the screen"
        assert page.evaluate("window.scrollY") == 0, f"turn {n + 1}: the page scrolled away from the box"
        assert page.locator("#redo").is_disabled(), f"turn {n + 1}: Redo is on with nothing to redo"
    last = page.locator("#story li.action").last.bounding_box()
    story = page.locator("#story").bounding_box()
    assert last["y"] + last["height"] <= story["y"] + story["height"] + 1, "the newest reply is in view"
    assert page.locator("#story li.action").first.locator("em").text_content() == "The road is dark."
    page.click("#undo")
    expect(page.locator("#redo")).to_be_enabled()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"ten-turns-{width}x{height}.png"))
    context.close()


def test_settings_try_what_is_typed_answer_beside_the_button_and_show_the_active_preset(site, alice, browser, fake_llm):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_cookies([{"name": "sessionid", "value": session_of(alice), "url": site.url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{site.url}/settings/")
    page.wait_for_selector("#settings[data-loaded]")
    assert page.locator(".model-notice").is_visible(), "no model yet: the page says so"
    page.fill("input[name=endpoint_url]", fake_llm.url)  # typed, not saved
    page.click("#list-models")
    expect(page.locator("#models-result")).to_contain_text("models listed")
    page.fill("input[name=model]", "fake-model")
    page.click("#test")
    expect(page.locator("#test-result")).to_contain_text("Connected")
    test_box, answer = page.locator("#test").bounding_box(), page.locator("#test-result").bounding_box()
    assert abs(answer["y"] - test_box["y"]) < 30, "the answer is beside the button"
    page.select_option("#preset", "balanced")
    assert page.input_value("input[name=temperature]") == "0.85", "a preset fills the boxes at once"
    expect(page.locator("#preset-active")).to_have_text("Active: balanced")
    page.fill("input[name=temperature]", "0.9")
    expect(page.locator("#preset-active")).to_have_text("Your own values")
    page.fill("input[name=temperature]", "0.85")
    page.click("#settings button[type=submit]")
    page.wait_for_selector("#settings-result.ok")
    page.reload()
    page.wait_for_selector("#settings[data-loaded]")
    expect(page.locator("#preset-active")).to_have_text("Active: balanced")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "settings-1280x800.png"))
    context.close()

    phone = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark", has_touch=True)
    phone.add_cookies([{"name": "sessionid", "value": session_of(alice), "url": site.url}])
    page = phone.new_page()
    page.goto(f"{site.url}/settings/")
    page.wait_for_selector("#settings[data-loaded]")
    page.screenshot(path=str(ARTIFACTS / "settings-390x844-dark.png"))
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > innerWidth + 1)
        .map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + (e.name || '')).slice(0, 8)"""
    )
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth"), f"sideways scroll: {wide}"
    phone.close()
    visitor = browser.new_context(viewport={"width": 1280, "height": 800})
    page = visitor.new_page()
    page.goto(f"{site.url}/")
    expect(page.locator("h1")).to_have_text("Everlore")
    page.screenshot(path=str(ARTIFACTS / "welcome-1280x800.png"))
    visitor.close()


@pytest.fixture
def mill_fire(alice):
    """Bram's card, a story in which he dies (told indirectly) and a ferryman named in three blocks,
    read by the pass."""
    from memory.story import memory_pass
    from stories.adventures import story_create
    from stories.models import StoryCard
    from stories.tree import writes

    adventure = story_create(owner_id=alice.pk, title="The Mill Fire", opening="Smoke over Harrowdale.")
    StoryCard.objects.create(
        adventure=adventure, type="character", name="Bram", keys=["Bram"], entry="Bram keeps the forge."
    )
    passages = [("ai", "Tomas poles the ferry across."), ("do", "wait")] * 9
    passages[13] = ("ai", "The healer pulls the blanket over Bram's face.")  # passage 15
    for kind, text in passages:
        writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text)
    while memory_pass.run(adventure.pk).more_due:
        pass
    return adventure.pk, session_of(alice)


def test_the_cards_drawer_shows_what_the_story_changed_and_the_player_reviews_it(site, mill_fire, browser):
    adventure_id, session = mill_fire
    context, page = open_play_page(browser, site.url, session, adventure_id)
    page.click("#toggle-world")
    bram = page.locator("#cards li.memory", has=page.locator("strong", has_text="Bram"))
    expect(bram.locator(".card-claims li")).to_have_text(re.compile(r"since passage 15: status — dead"))
    assert "Bram keeps the forge." in bram.inner_text(), "the player's text stands as written"
    bram.locator(".card-claims a").click()  # the evidence
    expect(page.locator("#story li.flash")).to_contain_text("blanket over Bram's face")
    expect(page.locator("#story-changes li")).to_have_text(re.compile(r"since passage 15: Bram, status — dead"))
    expect(page.locator("#proposed-cards li")).to_have_text(re.compile("Tomas"))
    page.locator("#proposed-cards button:has-text('Make a card')").click()
    expect(page.locator("#cards li.memory", has=page.locator("strong", has_text="Tomas"))).to_have_count(1)
    expect(page.locator("#proposed-cards")).to_be_hidden()
    bram.locator("button:has-text('Accept into the text')").click()
    expect(bram.locator("p.muted").first).to_contain_text("Since passage 15: dead.")
    expect(bram.locator(".card-claims li")).to_contain_text("in your text")
    page.screenshot(path=str(ARTIFACTS / "cards-what-the-story-changed.png"))
    context.close()
    for width, height, scheme in ((1280, 800, "light"), (1280, 800, "dark"), (390, 844, "light"), (390, 844, "dark")):
        seen = browser.new_context(
            viewport={"width": width, "height": height}, color_scheme=scheme, has_touch=width < 600
        )
        seen.add_cookies([{"name": "sessionid", "value": session, "url": site.url}])
        page = seen.new_page()
        page.goto(f"{site.url}/play/{adventure_id}/")
        page.click("#toggle-world")
        claim = page.locator("#cards .card-claims li").first
        claim.scroll_into_view_if_needed()
        expect(claim).to_be_visible()
        box = claim.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, f"a claim fits {width} px"
        turn = page.locator("#text").bounding_box()
        assert turn and turn["y"] + turn["height"] <= height, f"the turn box stays on screen at {width}x{height}"
        page.screenshot(path=str(ARTIFACTS / f"cards-what-the-story-changed-{width}x{height}-{scheme}.png"))
        seen.close()


@pytest.fixture
def ford(site, alice, fake_llm, django_user_model):
    """alice's story with two characters free to play, a link to join it, and the sessions of alice,
    bob and carol; made before Playwright starts."""
    from stories.accounts import ai_settings
    from stories.adventures import story_create
    from stories.party import members

    ai_settings.ai_settings_update(user_id=alice.pk, api_key="sk-alice-ford-0001", endpoint_url=fake_llm.url, model="m")
    adventure = story_create(
        owner_id=alice.pk,
        title="The Ford",
        opening="The river runs high below the fortress.",
        persona_name="Mira",
        cards=[
            {"type": "character", "name": "Sela", "keys": ["Sela"], "entry": "A scout."},
            {"type": "character", "name": "Oric", "keys": ["Oric"], "entry": "A general."},
        ],
    )
    _, code = members.invite_link(adventure=adventure, role="player")
    bob = django_user_model.objects.create_user(username="bob", password="bob-pass-123")
    carol = django_user_model.objects.create_user(username="carol", password="carol-pass-123")
    return adventure.pk, code, {u.username: session_of(u) for u in (alice, bob, carol)}


def test_three_players_play_one_story_live_in_free_and_round_robin_turns(site, ford, browser, fake_llm):
    from tests.support.fake_llm import Reply

    aid, code, sessions = ford
    fake_llm.reply = lambda body, n: "The wall is slick with rain, but the stones hold."
    fake_llm.stream_delay = 0.05
    pages = {}
    for name, character in (("bob", "Sela"), ("carol", "Oric")):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([{"name": "sessionid", "value": sessions[name], "url": site.url}])
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{site.url}/join/{code}/")
        if name == "carol":  # the join page as a desk and a phone show it: the characters and the button on screen
            expect(page.locator("main")).not_to_contain_text("No model is set up")  # the owner's model plays
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            for width, height in ((1280, 800), (390, 844)):
                for scheme in ("light", "dark"):
                    page.set_viewport_size({"width": width, "height": height})
                    page.emulate_media(color_scheme=scheme)
                    expect(page.locator("#join")).to_be_in_viewport()
                    shot = ARTIFACTS / f"together-join-{width}x{height}-{scheme}.png"
                    page.screenshot(path=str(shot))
            page.set_viewport_size({"width": 1280, "height": 900})
            page.emulate_media(color_scheme="light")
        page.get_by_label(character, exact=True).check()
        page.click("#join")
        page.wait_for_url(f"{site.url}/play/{aid}/")
        expect(page.locator("#member-list")).to_contain_text(f"{character} ({name})")
        pages[name] = page
    alice_context, alice = open_play_page(browser, site.url, sessions["alice"], aid)
    alice.click("#toggle-together")
    expect(alice.locator("#member-list li")).to_have_count(3)
    expect(alice.locator("#member-list")).to_contain_text("Oric (carol)")

    # free: bob plays; carol's page and alice's show his turn and the reply, written once
    bob, carol = pages["bob"], pages["carol"]
    expect(carol.locator("#member-list .here")).to_have_count(3)  # everyone has the story open
    bob.fill("#text", "I climb the wall")
    bob.press("#text", "Enter")
    expect(carol.locator("#story")).to_contain_text("Sela: I climb the wall")
    expect(carol.locator("#story")).to_contain_text("The wall is slick with rain, but the stones hold.")
    expect(alice.locator("#story")).to_contain_text("Sela: I climb the wall")
    expect(bob.locator("#story")).to_contain_text("the stones hold.")
    assert len(fake_llm.chat_requests()) == 1, "one model call for three pages"

    # round-robin: the owner sets it; each page says whose turn it is; a turn out of order is refused
    alice.select_option("#turn-mode", "round_robin")
    expect(carol.locator("#whose-turn")).to_have_text("It is your turn.")
    expect(bob.locator("#whose-turn")).to_have_text("It is Oric's turn.")
    bob.fill("#text", "I jump down")
    bob.press("#text", "Enter")
    expect(bob.locator("#status")).to_have_text("it is Oric's turn; yours comes in order")
    carol.fill("#text", "I hold the gate")
    carol.press("#text", "Enter")
    expect(bob.locator("#story")).to_contain_text("Oric: I hold the gate")
    expect(bob.locator("#whose-turn")).to_have_text("It is Mira's turn.")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    carol.screenshot(path=str(ARTIFACTS / "together-1280x900.png"))

    # a whisper: alice (Mira) tells Sela alone; bob reads it and its answer live, carol never does
    fake_llm.queue(Reply(text="Sela nods: the key has an owl on its bow."))
    alice.select_option("#to", "Sela")
    alice.fill("#text", "The gate key is under the third stone")
    alice.press("#text", "Enter")
    expect(bob.locator("#story")).to_contain_text("an owl on its bow")
    expect(bob.locator("#story .secret").first).to_have_text("🔒 whispered to Sela")
    expect(alice.locator("#story")).to_contain_text("an owl on its bow")
    expect(carol.locator("#whose-turn")).to_have_text("It is Sela's turn.")  # the whisper was Mira's turn
    expect(bob.locator("#whose-turn")).to_have_text("It is your turn.")
    expect(bob.locator("#status")).to_have_text("")  # the refusal of his turn out of order no longer holds
    bob.screenshot(path=str(ARTIFACTS / "together-whisper-1280x900.png"))
    # the owner's page and a member's, as a desk and a phone show them, light and dark: the turn box on screen
    for who, page in (("owner", alice), ("member", bob)):
        for width, height in ((1280, 800), (390, 844)):
            for scheme in ("light", "dark"):
                page.set_viewport_size({"width": width, "height": height})
                page.emulate_media(color_scheme=scheme)
                expect(page.locator("#text")).to_be_in_viewport()
                page.screenshot(path=str(ARTIFACTS / f"together-{who}-{width}x{height}-{scheme}.png"))
    expect(bob.locator("#together")).to_be_hidden()  # a phone: the panel is over the story only when asked for
    bob.click("#toggle-members")
    expect(bob.locator("#whose-turn")).to_be_visible()
    bob.screenshot(path=str(ARTIFACTS / "together-phone-dark-panel.png"))
    bob.set_viewport_size({"width": 1280, "height": 900})
    carol.reload()
    expect(carol.locator("#story")).to_contain_text("Oric: I hold the gate")
    for secret in ("third stone", "owl on its bow"):
        expect(carol.locator("body")).not_to_contain_text(secret)
    for page in (bob, carol):
        page.context.close()
    alice_context.close()
