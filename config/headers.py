"""Security headers on every answer: a Content-Security-Policy that allows only
the site's own scripts, styles, images and connections (no inline script, no
framing), and ``Cache-Control: private`` on everything that is not a public
static file, so no shared cache keeps a player's story or a moderator's page."""

from __future__ import annotations

from django.conf import settings
from django.utils.cache import patch_cache_control

from config.both_modes import BothModes

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        # Swagger UI and Django's admin set a few style attributes; scripts stay 'self' only.
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class SecurityHeadersMiddleware(BothModes):
    def __init__(self, get_response):
        super().__init__(get_response)
        self.static_prefix = "/" + settings.STATIC_URL.lstrip("/")

    def after(self, request, response):
        response.headers.setdefault("Content-Security-Policy", CSP)
        if not request.path.startswith(self.static_prefix):
            patch_cache_control(response, private=True, no_cache=True)
        return response
