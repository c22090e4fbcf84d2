"""The one family of domain errors. Each carries its HTTP status, a stable code
and a message a user can act on; ``answer`` is the one mapping the API, the web
pages and MCP use to show them. This module imports nothing of the project, so
any module may raise these without an import cycle."""

from __future__ import annotations


class DomainError(Exception):
    """A rule of the domain said no. ``message`` is for the user; never a key or a trace."""

    status = 400
    code = "invalid"
    field: str | None = None  # set: the message belongs to this input field

    def __init__(self, message: str, *, code: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after else {}

    def body(self) -> dict:
        if self.field:
            return {self.field: [self.message]}
        return {"detail": self.message, "error": self.code}


class InvalidRequest(DomainError):
    """Input that passed the serializer but breaks a rule; 400 with the message."""


class NotFound(DomainError):
    """ "Not yours" and "no such" alike (never a 403: another user's id reads as none); 404."""

    status = 404
    code = "not_found"

    def __init__(self, message: str = "Not found.", **kwargs):
        super().__init__(message, **kwargs)


class Forbidden(DomainError):
    """The user may see the object but not do this to it (a member of another's story doing what is
    the owner's); 403 with who may. Never for another user's object: that is NotFound."""

    status = 403
    code = "forbidden"


class Conflict(DomainError):
    """The request is valid but the state does not allow it now; 409."""

    status = 409
    code = "conflict"


class RateLimited(DomainError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int):
        super().__init__(message, retry_after=max(1, int(retry_after)))


class Unavailable(DomainError):
    """A service the request needs (the database, the broker) is away; 503, try again soon."""

    status = 503
    code = "unavailable"

    def __init__(
        self, message: str = "the service is briefly unavailable; try again in a few seconds", *, retry_after: int = 5
    ):
        super().__init__(message, retry_after=retry_after)


class UpstreamFailed(DomainError):
    """The request was fine; the user's own model endpoint (or its key) failed it: 424."""

    status = 424
    code = "upstream_failed"


class SecretUnreadable(UpstreamFailed):
    """A stored secret cannot be decrypted with any configured key (the keys were
    rotated without the old one). The player has to enter the key again."""

    code = "key_unreadable"

    def __init__(
        self,
        message: str = "your saved API key can no longer be read (the site's encryption keys changed); "
        "enter the key again in your settings",
    ):
        super().__init__(message)


DATABASE_DOWN = "the database is briefly unavailable; try again in a few seconds"


def as_domain_error(exc: BaseException) -> DomainError | None:
    """The domain error ``exc`` stands for: itself, or a database outage as
    ``Unavailable``; None for anything else (a bug: a 500)."""
    if isinstance(exc, DomainError):
        return exc
    from django.db import InterfaceError, OperationalError

    if isinstance(exc, (OperationalError, InterfaceError)):
        return Unavailable(DATABASE_DOWN)
    return None


def answer(exc: BaseException) -> tuple[int, dict, dict[str, str]] | None:
    """(status, JSON body, headers) for a domain error or an outage; None otherwise."""
    error = as_domain_error(exc)
    if error is None:
        return None
    return error.status, error.body(), error.headers()
