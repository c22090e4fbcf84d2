"""API keys at rest: MultiFernet over FIELD_ENCRYPTION_KEYS. The first key
encrypts; every key decrypts, so keys rotate by putting a new one first and
running `manage.py rotate_keys`."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SecretUnreadable(Exception):
    """A stored secret cannot be decrypted with any configured key."""


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(k.encode()) for k in settings.FIELD_ENCRYPTION_KEYS])


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "the stored API key cannot be decrypted with FIELD_ENCRYPTION_KEYS; enter the key again"
        ) from None


def rotate(token: str) -> str:
    """Re-encrypt under the first key."""
    try:
        return _fernet().rotate(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable("a stored API key cannot be decrypted with any configured key") from None
