"""Expected refusals log one line each, never a traceback; a bug still logs its traceback.
Read through the site's own configured log handler (settings.LOGGING), as an operator reads it."""

import io
import logging

import pytest
from django.contrib.auth.models import Group

from config.quiet_logs import ExpectedRefusals

pytestmark = pytest.mark.django_db


@pytest.fixture
def site_log():
    handler = next(h for h in logging.getLogger().handlers if any(isinstance(f, ExpectedRefusals) for f in h.filters))
    stream, handler.stream = handler.stream, io.StringIO()
    try:
        yield handler.stream
    finally:
        handler.stream = stream


def test_a_moderators_403_a_bad_host_and_a_404_are_one_line_each(client, django_user_model, site_log, alice_api):
    mod = django_user_model.objects.create_user(username="mod", password="mod-pass-123", is_staff=True)
    mod.groups.add(Group.objects.get(name="Moderators"))
    client.force_login(mod)
    assert client.get("/admin/auth/user/add/").status_code == 403
    assert client.get("/api/adventures/", HTTP_HOST="evil.example").status_code == 400
    assert alice_api.get("/api/adventures/424242/").status_code == 404
    text = site_log.getvalue()
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Traceback" not in text, text
    assert any("403" in line or "Forbidden" in line for line in lines), text
    assert any("DisallowedHost" in line or "Invalid HTTP_HOST" in line for line in lines), text
    assert not any(" ERROR " in line for line in lines), text


def test_a_bug_still_logs_its_traceback(site_log):
    logger = logging.getLogger("django.request")
    try:
        raise RuntimeError("a real bug")
    except RuntimeError:
        logger.error("Internal Server Error: /x", exc_info=True, extra={"status_code": 500})
    assert "Traceback" in site_log.getvalue() and "a real bug" in site_log.getvalue()
