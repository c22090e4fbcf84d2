"""Hand-written vector queries: a cursor that sends query vectors in binary."""

from __future__ import annotations

import weakref

import psycopg
from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from pgvector.psycopg.halfvec import register_halfvec_info
from psycopg.adapt import AdaptersMap
from psycopg.types import TypeInfo

# a connection's adapters with halfvec's registered, made once a connection: registering them on each
# cursor made a dozen classes every time (~0.1 ms, every turn's ranking and every pass's vectors)
_HALFVEC_ADAPTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Registered:
    """What pgvector registers halfvec's adapters on: a context with an adapters map."""

    def __init__(self, adapters: AdaptersMap):
        self.adapters = adapters


class _VectorCursor(psycopg.Cursor):
    """A cursor whose adapters start from its connection's halfvec map (a copy on write, ~1 µs)."""

    def __init__(self, connection, adapters: AdaptersMap):
        self._vector_adapters = AdaptersMap(adapters)
        super().__init__(connection)

    @property
    def adapters(self) -> AdaptersMap:
        return self._vector_adapters


def _adapters(raw) -> AdaptersMap:
    adapters = _HALFVEC_ADAPTERS.get(raw)
    if adapters is None:
        adapters = AdaptersMap(raw.adapters)
        register_halfvec_info(_Registered(adapters), TypeInfo.fetch(raw, "halfvec"))
        _HALFVEC_ADAPTERS[raw] = adapters
    return adapters


def vector_cursor():
    """A server-binding cursor on Django's connection with pgvector's binary
    halfvec adapter, wrapped by Django (so query logging and counts see it).
    Measured: a 1536-d vector as text costs ~1 ms to send and parse."""
    connection.ensure_connection()
    raw = connection.connection
    cursor = _VectorCursor(raw, _adapters(raw))
    # What Django's own connection.cursor() does with a cursor it made.
    connection.validate_thread_sharing()
    wrapper = CursorDebugWrapper if connection.queries_logged else CursorWrapper
    return wrapper(cursor, connection)
