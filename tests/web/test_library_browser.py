"""The library in the browser (headless Debian chromium, the real uvicorn server, the fake model
as the site's demo model): a newcomer signs up, picks a starter scenario, answers its question and
plays with the demo model; an author writes and publishes a scenario in the editor, another
player finds it by search and plays it, a third reports it, a moderator unpublishes it from the
report queue and the author reads why."""

import re

import pytest
from playwright.sync_api import expect

from tests.support.fake_llm import FakeLLM
from tests.support.processes import Site
from tests.web.test_browser import ARTIFACTS, browser, session_of, watch_csp  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
SHOTS = ARTIFACTS


@pytest.fixture(scope="module")
def demo_model():
    server = FakeLLM()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def library_site(django_db_setup, django_db_blocker, tmp_path_factory, demo_model):
    """The site with the fake model as its shared demo model (what `make run` offers newcomers)."""
    server = Site(
        tmp_path_factory.mktemp("library-site"),
        DEMO_ENDPOINT_URL=demo_model.url,
        DEMO_API_KEY="sk-demo-browser",
        DEMO_MODELS="demo-small",
        DEMO_TURNS_PER_DAY="50",
    )
    yield server
    server.stop()
    with django_db_blocker.unblock():
        server.wait_disconnected()


@pytest.fixture
def demo_counters_clear(settings):
    """Today's demo turns forgotten, and the rows migrations write (starters, Moderators) back in place."""
    import redis

    from tests.support.seed import migration_rows_restore

    migration_rows_restore()

    from stories.accounts import ai_settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(ai_settings.DEMO_COUNTER_PREFIX + "*"):
        client.delete(key)


def in_context(browser, url, session=None, *, width=1280, height=900):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": height})
    if session:
        context.add_cookies([{"name": "sessionid", "value": session, "url": url}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    return context, page


def test_a_newcomer_signs_up_picks_a_starter_answers_its_question_and_plays_with_the_demo(
    library_site,
    demo_counters_clear,  # before the browser: Playwright's greenlets would give the ORM a second connection
    demo_model,
    browser,  # noqa: F811
):
    url = library_site.url
    context, page = in_context(browser, url)
    violations = watch_csp(page)
    page.goto(f"{url}/accounts/signup/")
    page.fill("input[name=username]", "wren")
    page.fill("input[name=password1]", "lantern-road-2026!")
    page.fill("input[name=password2]", "lantern-road-2026!")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/library/")
    expect(page.locator(".scenario-tile")).to_have_count(4)  # the starters a default rating shows
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "library.png"))

    page.fill("input[name=q]", "caravan lanterns")
    page.click(".library-search button[type=submit]")
    expect(page.locator(".scenario-tile")).to_have_count(1)
    page.click("text=The Lantern Road")
    page.click("#play-open")
    dialog = page.locator("#start-dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Your name?").fill("Wren")
    page.screenshot(path=str(SHOTS / "scenario-start.png"))
    page.click("#play")
    page.wait_for_url(re.compile(r".*/play/\d+/$"))
    expect(page.locator("#story li.action").first).to_contain_text("You are Wren, hired guard")

    page.fill("#text", "I raise my lantern toward the dark one")
    page.press("#text", "Enter")
    expect(page.locator("#story li.action")).to_have_count(3)
    prompt = str(demo_model.chat_requests()[-1].body["messages"])
    assert "Wren" in prompt and "Old Bram" in prompt, "the demo model got the scenario's setup"

    # opting into mature scenarios in Settings shows the fifth starter
    page.goto(f"{url}/settings/")
    page.wait_for_selector("#settings[data-loaded]")
    expect(page.locator("select[name=content_rating]")).to_have_value("teen")
    page.select_option("select[name=content_rating]", "mature")
    page.click("#settings button[type=submit]")
    page.wait_for_selector("#settings-result.ok")
    page.goto(f"{url}/library/")
    expect(page.locator(".scenario-tile")).to_have_count(5)
    expect(page.locator(".scenario-tile", has_text="The Hollow House")).to_contain_text("mature")
    assert violations == []
    context.close()


@pytest.fixture
def four_players(demo_counters_clear, alice, bob, charlie, django_user_model):
    from django.contrib.auth.models import Group

    mod = django_user_model.objects.create_user(username="mod", password="mod-pass-123", is_staff=True)
    mod.groups.add(Group.objects.get(name="Moderators"))
    return {
        name: session_of(user) for name, user in [("alice", alice), ("bob", bob), ("charlie", charlie), ("mod", mod)]
    }


def test_an_author_publishes_another_finds_and_plays_a_third_reports_and_a_moderator_unpublishes(
    library_site,
    four_players,  # before the browser, as above
    browser,  # noqa: F811
):
    url = library_site.url
    author, page = in_context(browser, url, four_players["alice"])
    violations = watch_csp(page)
    page.goto(f"{url}/library/new/")
    page.fill("input[name=title]", "The Drowned Harbour")
    page.fill("textarea[name=description]", "A smuggler's port where the tide hides a bell tower. <b>not bold</b>")
    page.fill("textarea[name=opening]", "Fog on the quay. You are ${Your name?} and the harbourmaster owes you.")
    page.fill("input[name=tags]", "Pirates, mystery")
    page.select_option("select[name=rating]", "teen")
    page.fill("input[name=cover_emoji]", "⚓")
    page.click("#add-card")
    row = page.locator("#card-rows .card-row").last
    row.locator("[data-card=name]").fill("Quill")
    row.locator("[data-card=keys]").fill("Quill, harbourmaster")
    row.locator("[data-card=entry]").fill("The harbourmaster; he owes ${Your name?}.")
    page.screenshot(path=str(SHOTS / "scenario-editor.png"), full_page=True)
    page.click("#save")
    page.wait_for_url(re.compile(r".*/library/s/[\w-]+/$"))
    key = page.url.rstrip("/").rsplit("/", 1)[-1]
    expect(page.locator("h1")).to_have_text("The Drowned Harbour")
    expect(page.locator(".description")).to_contain_text("<b>not bold</b>")  # markup is text
    page.select_option("#visibility", "published")
    page.click("#share")
    expect(page.locator("#visibility")).to_have_value("published")

    # the editor opens what was saved; a change is a new version
    page.click("#edit")
    page.wait_for_selector("#scenario-form[data-loaded]")
    expect(page.locator("#card-rows .card-row")).to_have_count(1)
    page.fill("textarea[name=description]", "A smuggler's port where the tide hides a sunken bell tower.")
    page.click("#save")
    page.wait_for_url(f"{url}/library/s/{key}/")
    expect(page.locator(".scenario-head")).to_contain_text("version 2")

    reader, page2 = in_context(browser, url, four_players["bob"])
    page2.goto(f"{url}/library/")
    page2.fill("input[name=q]", "smuggler harbour")
    page2.click(".library-search button[type=submit]")
    expect(page2.locator(".scenario-tile")).to_have_count(1)
    page2.click("text=The Drowned Harbour")
    page2.click("#play-open")
    page2.locator("#start-dialog").get_by_label("Your name?").fill("Tam")
    page2.click("#play")
    page2.wait_for_url(re.compile(r".*/play/\d+/$"))
    expect(page2.locator("#story li.action").first).to_contain_text("You are Tam")
    reader.close()

    third, page3 = in_context(browser, url, four_players["charlie"])
    page3.goto(f"{url}/library/s/{key}/")
    page3.click("text=Report this scenario")
    page3.select_option("select[name=reason]", "spam")
    page3.fill("textarea[name=text]", "it advertises a casino")
    page3.click("#report")
    expect(page3.locator("p.ok")).to_contain_text("moderators will look")
    third.close()

    moderator, page4 = in_context(browser, url, four_players["mod"])
    page4.goto(f"{url}/admin/stories/scenarioreport/")
    expect(page4.locator("#result_list")).to_contain_text("it advertises a casino")
    page4.locator("#result_list input[name=_selected_action]").first.check()
    page4.select_option("select[name=action]", "unpublish_scenario")
    page4.click("button[name=index]")
    expect(page4.locator(".messagelist")).to_contain_text("Scenario unpublished: 1")
    page4.screenshot(path=str(SHOTS / "report-queue.png"))
    moderator.close()

    page.goto(f"{url}/library/mine/")
    expect(page.locator(".notice")).to_contain_text("A moderator unpublished this scenario (reported as spam")
    # the author's JSON export comes back in as a new private scenario; a file that is not one says why
    exported = page.request.get(f"{url}/api/scenarios/{key}/export/").body()
    page.set_input_files("#scenario-file", files=[{"name": "x.json", "mimeType": "application/json", "buffer": b"{"}])
    expect(page.locator("#scenario-import-result")).to_contain_text("not JSON")
    page.set_input_files(
        "#scenario-file", files=[{"name": "s.json", "mimeType": "application/json", "buffer": exported}]
    )
    page.wait_for_url(re.compile(r".*/library/s/[\w-]+/$"))
    assert key not in page.url
    expect(page.locator("h1")).to_have_text("The Drowned Harbour")
    expect(page.locator("#visibility")).to_have_value("private")
    page.goto(f"{url}/library/mine/")
    page.goto(f"{url}/library/?q=harbour")
    expect(page.locator(".scenario-tile")).to_have_count(0)
    assert violations == []
    author.close()
