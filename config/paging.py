"""Every list endpoint answers one page: ``?limit=`` (1..maximum) and
``?offset=``. The body stays a JSON array; ``X-Total-Count`` says how many
there are and a ``Link: <...>; rel="next"`` header points at the next page.
A limit over the maximum is a 400 that names it, never a silent clamp."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response

DEFAULT = 100
MAXIMUM = 500
OFFSET_MAX = 10_000_000


def query_serializer(*, default: int = DEFAULT, maximum: int = MAXIMUM) -> type[serializers.Serializer]:
    """The ``limit``/``offset`` query of one list endpoint (also its OpenAPI parameters)."""
    return type(f"Page{default}To{maximum}Query", (serializers.Serializer,), {
        "limit": serializers.IntegerField(min_value=1, max_value=maximum, required=False, default=default,
                                          help_text=f"page size, 1-{maximum} (default {default})"),
        "offset": serializers.IntegerField(min_value=0, max_value=OFFSET_MAX, required=False, default=0,
                                           help_text="rows to skip (default 0); see the Link header"),
    })


_QUERIES: dict[tuple[int, int], type[serializers.Serializer]] = {}


def parameters(*, default: int = DEFAULT, maximum: int = MAXIMUM) -> list:
    """For ``extend_schema(parameters=...)``."""
    return [_query(default, maximum)]


def _query(default: int, maximum: int) -> type[serializers.Serializer]:
    key = (default, maximum)
    if key not in _QUERIES:
        _QUERIES[key] = query_serializer(default=default, maximum=maximum)
    return _QUERIES[key]


def page(request, queryset, serializer_class, *, default: int = DEFAULT, maximum: int = MAXIMUM,
         context: dict | None = None) -> Response:
    """One page of ``queryset`` serialized, with X-Total-Count and Link headers."""

    query = _query(default, maximum)(data=request.query_params)
    query.is_valid(raise_exception=True)
    limit, offset = query.validated_data["limit"], query.validated_data["offset"]
    total = queryset.count()
    rows = list(queryset[offset: offset + limit])
    response = Response(serializer_class(rows, many=True, context=context or {}).data)
    response["X-Total-Count"] = str(total)
    if offset + limit < total:
        params = request.query_params.copy()
        params["limit"], params["offset"] = str(limit), str(offset + limit)
        response["Link"] = f'<{request.build_absolute_uri(request.path)}?{params.urlencode()}>; rel="next"'
    return response
