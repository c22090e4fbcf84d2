"""Domain errors of the story engine and how the API shows them."""

from __future__ import annotations

from rest_framework.response import Response


class InvalidRequest(Exception):
    """Input that passed the serializer but breaks a rule; 400 with the message."""


class Conflict(Exception):
    """The request is valid but the adventure's state does not allow it now; 409."""


class RateLimited(Exception):
    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


def domain_error_response(exc) -> Response | None:
    from stories.netguard import EndpointRefused
    from stories.providers import ProviderError
    from stories.tree import TreeError, TreeNotFound

    if isinstance(exc, TreeNotFound):
        return Response({"detail": str(exc)}, status=404)
    if isinstance(exc, TreeError):
        return Response({"detail": str(exc)}, status=409)
    if isinstance(exc, InvalidRequest):
        return Response({"detail": str(exc)}, status=400)
    if isinstance(exc, EndpointRefused):
        return Response({"endpoint_url": [str(exc)]}, status=400)
    if isinstance(exc, Conflict):
        return Response({"detail": str(exc)}, status=409)
    if isinstance(exc, RateLimited):
        return Response({"detail": str(exc)}, status=429, headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, ProviderError):
        body = {"detail": exc.message, "error": exc.code}
        if exc.code == "rate_limited":
            return Response(body, status=429, headers={"Retry-After": str(exc.retry_after or 30)})
        # 424: the request was fine; the user's model endpoint failed it.
        return Response(body, status=424)
    return None
