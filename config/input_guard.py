"""Hostile input stops at the door with a 400 that names the problem.

PostgreSQL text cannot hold NUL, and a lone UTF-16 surrogate cannot be encoded
to UTF-8; either one used to reach the database and answer 500. Nor can a JSON
column hold NaN or an infinity (Python's parser takes ``NaN``, ``Infinity`` and
``1e400``, which JSON itself does not allow): they answered 500 too. Deeply nested
JSON used to exhaust Python's recursion limit. Here every JSON body, every URL
path and query string, and every credential header is checked once, before any
view runs: whatever a view stores or looks up is text Postgres can hold.
"""

from __future__ import annotations

import json
import math
import re
from urllib.parse import unquote_to_bytes

from django.http import JsonResponse
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from config.both_modes import BothModes

JSON_DEPTH_MAX = 64  # nesting levels of arrays and objects in a request body
# Escapes that decode to text Postgres cannot hold: NUL, and a UTF-16 surrogate half.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


class BadText(ValueError):
    """A string holds a character the site cannot store; the message says where and what."""


def text_problem(text: str) -> str | None:
    """What is wrong with ``text`` (None when Postgres can store it)."""
    if "\x00" in text:
        return "holds a NUL character (\\u0000), which cannot be stored; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text; send valid Unicode"
    return None


def check_text(text: str, *, where: str) -> None:
    problem = text_problem(text)
    if problem:
        raise BadText(f"{where} {problem}")


NOT_A_NUMBER = "is not a finite number (NaN, Infinity and numbers past 1e308 are not JSON); send a finite number"


def _constant(name: str):
    raise ValueError(f"the body holds {name}, which {NOT_A_NUMBER[3:]}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a JSON number (past 1e308); send a finite number")
    return value


def check_value(value, *, where: str = "the body", depth_max: int = JSON_DEPTH_MAX) -> None:
    """Walk a parsed JSON value (iteratively: depth is what is being checked) and
    raise BadText at the first key or string that cannot be stored, ValueError at
    a number that is not finite, or ValueError past ``depth_max`` levels of nesting."""
    stack = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, where=path)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{path} {NOT_A_NUMBER}")
        elif isinstance(item, dict):
            if depth >= depth_max:
                raise ValueError(f"{path} is nested deeper than {depth_max} levels")
            for key, child in item.items():
                check_text(key, where=f"a key of {path}")
                stack.append((child, f"{path}.{key}" if path != "the body" else key, depth + 1))
        elif isinstance(item, list):
            if depth >= depth_max:
                raise ValueError(f"{path} is nested deeper than {depth_max} levels")
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))


def parse_json(raw: bytes) -> object:
    """A request body as JSON, refusing what no view should ever see.
    Raises ValueError (BadText included) with a message a client can act on."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the body is not valid UTF-8 (byte {exc.start})") from None
    try:
        data = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"the body is nested deeper than {JSON_DEPTH_MAX} levels") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"JSON parse error - {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, (dict, list)):
        check_value(data)
    elif isinstance(data, str):
        check_text(data, where="the body")
    return data


class StrictJSONParser(JSONParser):
    """DRF's JSON parser with the checks above (and strict UTF-8)."""

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        try:
            return parse_json(raw)
        except ValueError as exc:
            raise ParseError(str(exc)) from None


def _url_problem(request) -> str | None:
    raw_path = request.META.get("PATH_INFO", "")
    if "\x00" in raw_path:
        return "the URL holds a NUL character (%00); remove it"
    query = request.META.get("QUERY_STRING", "")
    if query:
        decoded = unquote_to_bytes(query.replace("+", " "))
        if b"\x00" in decoded:
            return "the query string holds a NUL character (%00); remove it"
        try:
            decoded.decode("utf-8")
        except UnicodeDecodeError:
            return "the query string is not valid UTF-8; percent-encode UTF-8 text"
    for header in ("HTTP_AUTHORIZATION", "HTTP_COOKIE", "HTTP_X_CSRFTOKEN"):
        if "\x00" in request.META.get(header, ""):
            return f"the {header[5:].replace('_', '-').title()} header holds a NUL character"
    return None


class InputGuardMiddleware(BothModes):
    """A URL, query string or credential header holding NUL (or a query string
    that is not UTF-8) gets a 400 before routing: no view, no lookup runs."""

    def before(self, request):
        problem = _url_problem(request)
        return JsonResponse({"detail": problem}, status=400) if problem else None
