"""Text fields that take text only. DRF turns a JSON number sent for a text
field into its digits; the schema says string, so a number (or any other
non-string) sent for text is a 400. Every input serializer of the project uses
these (ModelSerializers through ``StrictModelSerializer``'s field mapping)."""

from __future__ import annotations

import threading

from django.db import models
from rest_framework import serializers
from rest_framework.fields import empty


class _StringsOnly:
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        # the bound is the text as sent (the schema's maxLength), not what is left once it is trimmed
        if getattr(self, "max_length", None) is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


class TextField(_StringsOnly, serializers.CharField):
    pass


class EmailField(_StringsOnly, serializers.EmailField):
    pass


class PatternField(_StringsOnly, serializers.RegexField):
    pass


class _WholeNumber(serializers.IntegerField):
    """A JSON integer only (a model's integer column; its bounds are the column's)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class FloatField(serializers.FloatField):
    """A JSON number only (DRF's own takes "0.5" and true)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class BooleanField(serializers.BooleanField):
    """true or false only (DRF's own also takes "yes", "1", 0 ...)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


ID_MAX = 2**31 - 1  # the largest id a row of ours has (Postgres integer)


class IntegerField(_WholeNumber):
    """A JSON integer only: DRF's own takes "12", 12.0 and true (as 1); a document's ids and depths
    are numbers, and a bound (``max_value``) that fits the column is required."""

    def __init__(self, *, max_value: int, min_value: int = 0, **kwargs):
        super().__init__(max_value=max_value, min_value=min_value, **kwargs)


class ChoiceField(serializers.ChoiceField):
    def get_value(self, dictionary):
        # DRF reads a blank form or query value ("?turn=") as absent, so the default would answer
        # it; a blank is no choice: it is refused like any other value that is not one
        value = super().get_value(dictionary)
        if value is serializers.empty and self.field_name in dictionary and dictionary.get(self.field_name) == "":
            return ""
        return value

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid_choice", input=str(data)[:40])
        return super().to_internal_value(data)


class DateTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time as text; a day or hour that does not exist is a 400."""

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid", format="ISO 8601 text, e.g. 2026-01-31T18:30:00Z")
        return super().to_internal_value(value)


class StrictModelSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose columns take what the schema says and nothing DRF would turn into it:
    text only for text, true/false for a flag, a JSON number for a number."""

    serializer_choice_field = ChoiceField
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: TextField,
        models.TextField: TextField,
        models.EmailField: EmailField,
        models.SlugField: TextField,
        models.BooleanField: BooleanField,
        models.DateTimeField: DateTimeField,
        models.FloatField: FloatField,
        **dict.fromkeys(
            (
                models.IntegerField,
                models.BigIntegerField,
                models.SmallIntegerField,
                models.PositiveIntegerField,
                models.PositiveSmallIntegerField,
                models.PositiveBigIntegerField,
            ),
            _WholeNumber,
        ),
    }


def error_sentence(errors, *, path: str = "", most: int = 5) -> str:
    """A serializer's (nested) errors as one sentence naming where each is:
    ``actions[3].depth: Ensure this value is less than or equal to 20000.``"""
    found: list[str] = []

    def walk(node, where):
        if len(found) >= most:
            return
        if isinstance(node, dict):
            for key, child in node.items():
                name = (
                    where
                    if key == "non_field_errors"
                    else (f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key))
                )
                walk(child, name)
        elif isinstance(node, list) and node and all(isinstance(x, str) for x in node):
            found.append(f"{where or 'the document'}: {' '.join(str(x) for x in node)}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                if child:
                    walk(child, f"{where}[{i}]")
        else:
            found.append(f"{where or 'the document'}: {node}")

    walk(errors, path)
    return "; ".join(found[:most]) or "the document is malformed"


def list_of(serializer_class, **kwargs) -> serializers.ListSerializer:
    """A list of ``serializer_class`` objects whose items are never null. ``Serializer(many=True,
    allow_null=True)`` is not that: DRF hands ``allow_null`` to the item serializer too, so a list
    that may itself be null would take ``[null]`` and hand None on as an item."""
    return serializers.ListSerializer(child=serializer_class(), **kwargs)


def valid(serializer_class, request, *, query: bool = False, partial: bool = False, **kwargs) -> dict:
    """The validated body (``query``: the query string), or a 400 naming each field to fix. A body
    field the serializer does not declare, at any depth, is one to fix ("top_p" where the settings
    take no such field): a client's typo or a setting the site does not have is never taken in
    silence. ``partial`` (a PATCH): a top-level field may be left out, but a value given is checked
    whole, nested items included (a list of cards replaces the list: each card needs its name)."""
    # a query as a plain dict: an empty ``?limit=`` is a value to refuse, not a field left out (DRF's form rule)
    serializer = serializer_class(data=request.query_params.dict() if query else request.data, **kwargs)
    if partial:
        for field in serializer.fields.values():
            field.required, field.default = False, empty  # left out: left as it is, never a default
    if not query:
        unknown = _unknown(serializer, request.data)
        if unknown:
            raise serializers.ValidationError(unknown)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _unknown(field, data) -> dict:
    """``{name: [message]}`` for each key of ``data`` that ``field`` (a serializer, a list of them)
    does not declare, nested where the data nests."""
    if isinstance(field, serializers.ListSerializer):
        if not isinstance(data, list):
            return {}
        found = {str(i): e for i, item in enumerate(data) if (e := _unknown(field.child, item))}
        return found
    if not isinstance(field, serializers.Serializer) or not isinstance(data, dict):
        return {}
    out = {}
    for key, value in data.items():
        inner = field.fields.get(key)
        if inner is None:
            known = ", ".join(sorted(n for n, f in field.fields.items() if not f.read_only))
            out[key] = [f"unknown field: the fields here are {known}"]
        elif found := _unknown(inner, value):
            out[key] = found
    return out


# ---------------------------------------------------------------------------- answers on a hot path

_built = threading.local()


def represent(serializer_class: type[serializers.BaseSerializer], instance, *, context: dict | None = None, many=False):
    """``serializer_class(instance, context=context, many=many).data``, on a serializer built once per
    thread. DRF builds a serializer's fields (a deep copy of the declared ones, a model's introspected)
    for every instance: for a turn's answer (its actions, its context's parts, its usage) that was ~85%
    of its cost (0.98 ms against 0.14 reused). A field holds no state of the instance it represents;
    the context is the root's, set here for each call."""
    built = _built.__dict__.setdefault("serializers", {})
    serializer = built.get((serializer_class, many))
    if serializer is None:
        serializer = built[(serializer_class, many)] = serializer_class(many=many) if many else serializer_class()
    serializer._context = context or {}
    try:
        return serializer.to_representation(instance)
    finally:
        serializer._context = {}
