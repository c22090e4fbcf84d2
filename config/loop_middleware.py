"""Django's own middleware, run on the event loop when they do no I/O.

Under the ASGI server every synchronous middleware method is called through
``sync_to_async``: a hop to the request's thread and back, twice per
middleware, each a wait for the interpreter lock on a busy process. Security, common,
CSRF, authentication (``request.user`` stays lazy), clickjacking and the
request half of sessions and messages are checks on the request and headers on
the answer, so here they run inline on the loop. What does touch the database
still goes to a thread: a session that was changed is saved there, and
messages are stored there when a request added or read some. Under WSGI (and
Django's test client) each behaves exactly as Django's own.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.core import checks
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.module_loading import import_string


class OnTheLoop:
    """Mixed in before one of Django's MiddlewareMixin classes."""

    def response_needs_thread(self, request, response) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request, response):
                response = await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
            else:
                response = self.process_response(request, response)
        return response


class Security(OnTheLoop, SecurityMiddleware):
    pass


class Common(OnTheLoop, CommonMiddleware):
    pass


class XFrameOptions(OnTheLoop, XFrameOptionsMiddleware):
    pass


class Authentication(OnTheLoop, AuthenticationMiddleware):
    pass


class Csrf(OnTheLoop, CsrfViewMiddleware):
    """Its view check runs inline too (Django would hop for it even on an exempt view)."""

    def __init__(self, get_response):
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            sync_view = self.process_view

            async def process_view(request, callback, callback_args, callback_kwargs):
                return sync_view(request, callback, callback_args, callback_kwargs)

            self.process_view = process_view


class Session(OnTheLoop, SessionMiddleware):
    def response_needs_thread(self, request, response) -> bool:
        session = getattr(request, "session", None)
        # Django's process_response saves the session (and reads its expiry) only when it was
        # changed or every request is saved; otherwise it reads flags and sets headers
        return (
            session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST) and not session.is_empty()
        )


class Messages(OnTheLoop, MessageMiddleware):
    def response_needs_thread(self, request, response) -> bool:
        storage = getattr(request, "_messages", None)
        # update() reads the stored messages (the session: a database read) only when the request
        # added or read some
        return storage is not None and (storage.used or storage.added_new)


# Django's deploy checks security.W001-W003 look for its own class paths in MIDDLEWARE; the site
# runs subclasses of them (above), so those three are silenced in settings and checked here instead.
_GUARDS = {"W001": SecurityMiddleware, "W002": XFrameOptionsMiddleware, "W003": CsrfViewMiddleware}


@checks.register(checks.Tags.security, deploy=True)
def guards_in_place(app_configs, **kwargs) -> list[checks.Warning]:
    """Django's security, clickjacking and CSRF middleware (or a subclass of each) are in MIDDLEWARE."""
    installed = []
    for path in settings.MIDDLEWARE:
        try:
            installed.append(import_string(path))
        except ImportError:
            continue
    return [
        checks.Warning(
            f"{guard.__module__}.{guard.__name__} (or a subclass, such as "
            f"config.loop_middleware's) is not in MIDDLEWARE",
            id=f"config.{code}",
        )
        for code, guard in _GUARDS.items()
        if not any(isinstance(m, type) and issubclass(m, guard) for m in installed)
    ]
