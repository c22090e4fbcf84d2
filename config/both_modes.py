"""A base for the site's own middleware that runs in either server mode.

Under the ASGI server a middleware that is only synchronous would run the rest
of the request, the awaited model call included, inside a thread it holds for
the whole request. These middleware do no I/O (checks on the request, headers
on the answer), so in ASGI mode they run on the event loop itself; under WSGI
(and Django's test client) they run as plain functions.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction


class BothModes:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def before(self, request):
        """An answer that stops the request here, or None to go on."""
        return None

    def after(self, request, response):
        return response

    def failed(self, request, exc: Exception):
        """An answer for an exception the rest of the chain raised, or None to let it rise."""
        return None

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        stop = self.before(request)
        if stop is not None:
            return stop
        try:
            response = self.get_response(request)
        except Exception as exc:
            response = self.failed(request, exc)
            if response is None:
                raise
        return self.after(request, response)

    async def _acall(self, request):
        stop = self.before(request)
        if stop is not None:
            return stop
        try:
            response = await self.get_response(request)
        except Exception as exc:
            response = self.failed(request, exc)
            if response is None:
                raise
        return self.after(request, response)
