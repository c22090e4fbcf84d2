"""Who is asking, and may they: the client's address behind trusted proxies,
one answer to "is this account active", one login throttle for every login
surface (API, web, admin), and what a password change ends.

Every login goes through Django's ``authenticate()``; the backend here refuses a
username/address pair that has failed too often before it checks the password,
and the ``user_login_failed`` signal counts each failure. So the API, the web
page and the admin share one limit without each view remembering to ask.
"""

from __future__ import annotations

import ipaddress
import logging
from functools import lru_cache, wraps

from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.dispatch import receiver
from rest_framework import authentication, exceptions
from rest_framework.throttling import BaseThrottle

from config.compiled_once import CompiledOnce
from config.errors import InvalidRequest
from stories import limits

log = logging.getLogger(__name__)
BACKEND = "stories.accounts.auth.ThrottledModelBackend"
THROTTLED = "Too many failed logins for this account from your address; wait a few minutes and try again."


# ---------------------------------------------------------------------------- who


@lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in net for net in _networks(tuple(settings.TRUSTED_PROXIES)))


def client_ip(request) -> str:
    """The client's address. ``X-Forwarded-For`` counts only when the peer is a
    configured trusted proxy (TRUSTED_PROXIES); then the rightmost address that
    is not itself a trusted proxy is the client. Anyone else's header is ignored,
    so a client cannot choose the address its limits are counted under."""
    peer = request.META.get("REMOTE_ADDR", "")
    if not settings.TRUSTED_PROXIES or not _trusted(peer):
        return peer
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a malformed hop: count the proxy, not a made-up address
    return hops[0] if hops else peer


# ---------------------------------------------------------------------------- how often

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _writer(request) -> str:
    user = getattr(request, "user", None)
    return str(user.pk) if user is not None and user.is_authenticated else f"ip:{client_ip(request)}"


class WritesThrottle(BaseThrottle):
    """Every write of the API (POST, PUT, PATCH, DELETE) counts toward its account's
    WRITES_PER_MINUTE (an anonymous client's: its address's), once authenticated and before
    anything else of the request is read; past it RateLimited, a 429 with Retry-After."""

    def allow_request(self, request, view) -> bool:
        if request.method in WRITE_METHODS:
            limits.writes(who=_writer(request))
        return True


def writes_limited(view):
    """A page's view whose writes count as the API's do (WritesThrottle); a refused one is the
    site's 429 page (config.api_errors)."""

    @wraps(view)
    def limited(request, *args, **kwargs):
        if request.method in WRITE_METHODS:
            limits.writes(who=_writer(request))
        return view(request, *args, **kwargs)

    return limited


# ---------------------------------------------------------------------------- may they


def account_active(user) -> bool:
    """The one answer to "may this account act now": its sessions, API tokens,
    world tokens (REST and MCP) and logins all ask here. Suspended: False."""
    return bool(user is not None and getattr(user, "is_active", False))


class ThrottledModelBackend(ModelBackend):
    """Django's backend behind the login throttle, with account_active as the rule."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is not None and username is not None:
            if limits.login_blocked(username=str(username), ip=client_ip(request)):
                request.login_blocked = True
                raise PermissionDenied(THROTTLED)  # stops every backend; the password is not checked
        return super().authenticate(request, username=username, password=password, **kwargs)

    def user_can_authenticate(self, user):
        return account_active(user)


@receiver(user_login_failed)
def _count_failed_login(sender, credentials, request=None, **kwargs):
    if request is None or getattr(request, "login_blocked", False):
        return
    username = str(credentials.get("username", ""))
    limits.login_failed(username=username, ip=client_ip(request))


def login_throttled(request) -> bool:
    """True when the last authenticate() on this request was refused by the throttle."""
    return bool(getattr(request, "login_blocked", False))


class ThrottledFormMixin:
    """For Django's login forms (web and admin): a throttled login gets its own
    message (code "throttled"), not "wrong password"."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            if login_throttled(self.request):
                raise ValidationError(THROTTLED, code="throttled") from None
            raise


class LoginForm(ThrottledFormMixin, auth_forms.AuthenticationForm):
    pass


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """Django's form; the current password is checked through authenticate(), so
    guesses count toward the login throttle like any login."""

    def clean_old_password(self):
        from django.contrib.auth import authenticate

        old = self.cleaned_data["old_password"]
        if authenticate(self.request, username=self.user.get_username(), password=old) is None:
            if login_throttled(self.request):
                raise ValidationError(THROTTLED, code="throttled")
            raise ValidationError(self.error_messages["password_incorrect"], code="password_incorrect")
        return old

    def __init__(self, user, *args, request=None, **kwargs):
        self.request = request
        super().__init__(user, *args, **kwargs)


def throttled_response(response):
    """Mark a login page that refused a throttled login as 429 with Retry-After."""
    response.status_code = 429
    response["Retry-After"] = str(settings.LOGIN_FAILURE_WINDOW_S)
    return response


def _token_query(shape, key):
    from rest_framework.authtoken.models import Token

    return Token.objects.select_related("user").filter(key=key)


_TOKEN = CompiledOnce(_token_query)  # every API request asks it: compiled once (config.compiled_once)


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token header (``Authorization: Token ...``), asking account_active."""

    def authenticate_credentials(self, key):
        token = _TOKEN.first(key=key)
        if token is None:
            raise exceptions.AuthenticationFailed("invalid token")
        if not account_active(token.user):
            raise exceptions.AuthenticationFailed("this account is suspended")
        return token.user, token


# ---------------------------------------------------------------------------- passwords


class EndSessionsOnPasswordChange:
    """Not a rule on passwords: Django calls every validator's ``password_changed``
    whenever a password is saved (API, web page, reset link, admin, the
    changepassword command), so this is the one place a changed password ends
    the account's API tokens. Other browser sessions end by themselves (Django
    checks the password hash in each session); the view that changed it keeps
    its own session with ``update_session_auth_hash``."""

    def validate(self, password, user=None):
        return None

    def password_changed(self, password, user=None):
        if user is None or user.pk is None:
            return
        from rest_framework.authtoken.models import Token

        Token.objects.filter(user_id=user.pk).delete()

    def get_help_text(self):
        return ""


class WrongPassword(InvalidRequest):
    """The current password given for a change is not the account's."""


def password_change(*, request, old_password: str, new_password: str) -> str:
    """Set a new password after checking the current one (through authenticate(),
    so guesses count toward the login throttle). Every API token and every other
    session ends; this request's session stays. Returns this client's new token.
    Raises WrongPassword, or RateLimited while the throttle holds."""
    from django.contrib.auth import authenticate, update_session_auth_hash
    from rest_framework.authtoken.models import Token

    from config.errors import RateLimited

    user = request.user
    if authenticate(request, username=user.get_username(), password=old_password) is None:
        if login_throttled(request):
            raise RateLimited(THROTTLED, retry_after=settings.LOGIN_FAILURE_WINDOW_S)
        raise WrongPassword("old_password is not your current password")
    user.set_password(new_password)
    user.save(update_fields=["password"])  # EndSessionsOnPasswordChange ends the tokens
    if hasattr(request, "session"):
        update_session_auth_hash(request, user)
    return Token.objects.create(user=user).key


def signup(*, username: str, password: str, email: str, ip: str) -> tuple:
    """A new account (within the per-address signup limit) and its API token: (user, token key)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    limits.signup(ip=ip)
    with transaction.atomic():
        user = get_user_model().objects.create_user(username=username, password=password, email=email)
        token = Token.objects.create(user=user)
    return user, token.key


def api_token_for(user) -> str:
    """The account's API token, made on first use."""
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return token.key


def api_tokens_end(user) -> None:
    """Log out everywhere the API token is used."""
    from rest_framework.authtoken.models import Token

    Token.objects.filter(user=user).delete()
