"""WhiteNoise's static files in either server mode. WhiteNoise's middleware is
synchronous only; under the ASGI server Django would run the rest of every
request (a turn's awaited model call included) inside a thread held for it.
Here a request for a static file is served as WhiteNoise serves it, and every
other request passes on in the server's own mode."""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        super().__init__(get_response)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _static_file(self, request):
        if self.autorefresh:
            return self.find_file(request.path_info)
        return self.files.get(request.path_info)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request):
        static_file = (
            self._static_file(request) if not self.autorefresh else await sync_to_async(self._static_file)(request)
        )
        if static_file is not None:
            return await sync_to_async(self.serve)(static_file, request)
        return await self.get_response(request)
