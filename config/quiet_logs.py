"""Expected refusals log one line, never a traceback.

Django logs every 4xx that an exception raised (a moderator's 403 in the admin, a
bad ``Host`` header, a 404) with the exception's traceback, and a bad Host at
ERROR; a 503 the site gives on purpose (busy, the database briefly away) at
ERROR with a traceback too. That buried the real errors (192 tracebacks in one
moderator's walk). This filter sits on the site's log handler: such records keep
their one line (method, path, status), at WARNING at most; a 500 keeps its
traceback.
"""

from __future__ import annotations

import logging

ON_PURPOSE = {503}  # statuses the site answers by design (Retry-After), not bugs


class ExpectedRefusals(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        refusal = (
            record.name == "django.request" and isinstance(status, int) and (status < 500 or status in ON_PURPOSE)
        ) or record.name.startswith("django.security")
        if refusal:
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
