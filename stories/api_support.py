"""What every API view of the story room shares: the owner-checked adventure
and input validation."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.fields import empty

from stories import adventures
from stories.models import Adventure


def adventure_for(request, adventure_id, *, for_play: bool = False) -> Adventure:
    """The request user's adventure; another user's id is a 404. ``for_play``: with the owner's AI settings."""
    return adventures.access_adventure(user_id=request.user.id, adventure_id=adventure_id, for_play=for_play)


def valid(serializer_class, request, *, query: bool = False, partial: bool = False, **kwargs) -> dict:
    """The validated body (``query``: the query string), or a 400 naming each field to fix. A body
    field the serializer does not declare, at any depth, is one to fix ("top_p" where the settings
    take no such field): a client's typo or a setting the site does not have is never taken in
    silence. ``partial`` (a PATCH): a top-level field may be left out, but a value given is checked
    whole, nested items included (a list of cards replaces the list: each card needs its name)."""
    serializer = serializer_class(data=request.query_params if query else request.data, **kwargs)
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
