"""Errors as JSON a user can act on: domain errors become 4xx, bodies over the
limit 413, unknown /api/ URLs a JSON 404. A 500 is a bug."""

from __future__ import annotations

import io
import sys

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config import errors
from config.both_modes import BothModes


def too_large() -> JsonResponse:
    return JsonResponse(
        {"detail": f"the request body is over the limit of {settings.REQUEST_BODY_MAX_BYTES} bytes"},
        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    )


class BodySizeLimitMiddleware(BothModes):
    """Refuse a declared Content-Length over the limit before reading anything.

    Under WSGI a chunked body (no Content-Length) is read up to the limit and
    one byte more: over it is a 413, under it the bytes become the request body
    (left alone, Django would read a body without a length as empty). Under the
    ASGI server, config.asgi_guard has already counted every byte of the body.
    """

    def before(self, request):
        limit = settings.REQUEST_BODY_MAX_BYTES
        declared = request.META.get("CONTENT_LENGTH")
        stream = request.META.get("wsgi.input")
        if not declared and stream is not None and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            body = _read_at_most(stream, limit + 1)
            if len(body) > limit:
                return too_large()
            request._body = body
            request._stream = io.BytesIO(body)
            request.META["CONTENT_LENGTH"] = str(len(body))
            declared = str(len(body))
        try:
            length = int(declared or 0)
        except ValueError:
            return JsonResponse({"detail": "Content-Length is not a number"}, status=400)
        if length > limit:
            return too_large()
        return None

    def failed(self, request, exc):
        return too_large() if isinstance(exc, RequestDataTooBig) else None


def _read_at_most(stream, size: int) -> bytes:
    parts, total = [], 0
    while total < size:
        chunk = stream.read(min(64 * 1024, size - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def exception_handler(exc, context):
    """DRF's handler, after the one mapping of domain errors and outages (config.errors.answer)."""
    if isinstance(exc, RequestDataTooBig):
        return too_large()
    answered = errors.answer(exc)
    if answered is not None:
        status_code, body, headers = answered
        return Response(body, status=status_code, headers=headers)
    if isinstance(exc, Http404):  # Django's own (an unknown object in a generic view): the one NotFound
        return Response(errors.NotFound().body(), status=404)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, ValidationError) and isinstance(response.data, list):
        response.data = {"detail": " ".join(str(x) for x in response.data)}
    return response


class DomainErrorMiddleware(BothModes):
    """The one mapping (config.errors.answer) for views outside DRF: a domain
    error or an outage raised by a web page or a plain JSON view becomes its
    status with the message (JSON under /api/, a page elsewhere)."""

    def process_exception(self, request, exc):
        error = errors.as_domain_error(exc)
        if error is None:
            return None
        return error_answer(request, error)


def error_answer(request, error: errors.DomainError):
    """A domain error or an outage as JSON under /api/, as a short page elsewhere."""
    if request.path.startswith("/api/"):
        response = JsonResponse(error.body(), status=error.status)
    else:
        from django.http import HttpResponse
        from django.template.loader import render_to_string

        # No request context: during an outage the context processors would ask the database again.
        response = HttpResponse(
            render_to_string("error.html", {"message": error.message, "status": error.status}), status=error.status
        )
    for name, value in error.headers().items():
        response[name] = value
    return response


def api_not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse(errors.NotFound().body(), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def api_server_error(request):
    """handler500. An exception that is an outage (the database went away
    mid-request, in a view or a middleware) answers 503 with Retry-After;
    anything else is a bug: a logged 500."""
    exc = sys.exc_info()[1]
    outage = errors.as_domain_error(exc) if exc is not None else None
    if outage is not None:
        return error_answer(request, outage)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal error; it has been logged"}, status=500)
    from django.views.defaults import server_error

    return server_error(request)
