"""API keys at rest: MultiFernet over FIELD_ENCRYPTION_KEYS. The first key
encrypts; every key decrypts, so keys rotate by putting a new one first and
running `manage.py rotate_keys`."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from config.errors import SecretUnreadable


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(k.encode()) for k in settings.FIELD_ENCRYPTION_KEYS])


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable() from None


def rotate(token: str) -> str:
    """Re-encrypt under the first key."""
    try:
        return _fernet().rotate(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable() from None
