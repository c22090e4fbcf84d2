"""Every list endpoint answers one page (DRF's LimitOffsetPagination): ``?limit=`` (1..maximum) and
``?offset=``. The body stays a JSON array; ``X-Total-Count`` says how many
there are and a ``Link: <...>; rel="next"`` header points at the next page.
A limit over the maximum is a 400 that names it, never a silent clamp."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

DEFAULT = 100
MAXIMUM = 500
OFFSET_MAX = 10_000_000


def query_serializer(*, default: int = DEFAULT, maximum: int = MAXIMUM) -> type[serializers.Serializer]:
    """The ``limit``/``offset`` query of one list endpoint (also its OpenAPI parameters)."""
    return type(
        f"Page{default}To{maximum}Query",
        (serializers.Serializer,),
        {
            "limit": serializers.IntegerField(
                min_value=1,
                max_value=maximum,
                required=False,
                default=default,
                help_text=f"page size, 1-{maximum} (default {default})",
            ),
            "offset": serializers.IntegerField(
                min_value=0,
                max_value=OFFSET_MAX,
                required=False,
                default=0,
                help_text="rows to skip (default 0); see the Link header",
            ),
        },
    )


_QUERIES: dict[tuple[int, int], type[serializers.Serializer]] = {}


def parameters(*, default: int = DEFAULT, maximum: int = MAXIMUM) -> list:
    """For ``extend_schema(parameters=...)``."""
    return [_query(default, maximum)]


def _query(default: int, maximum: int) -> type[serializers.Serializer]:
    key = (default, maximum)
    if key not in _QUERIES:
        _QUERIES[key] = query_serializer(default=default, maximum=maximum)
    return _QUERIES[key]


class LimitOffsetHeaders(LimitOffsetPagination):
    """DRF's limit/offset pagination, strict and with the page data in headers:
    a limit or offset out of bounds is a 400 naming it (DRF alone would clamp
    it silently), the body stays a JSON array, and X-Total-Count and
    ``Link: <...>; rel="next"`` say what else there is."""

    default_limit = DEFAULT
    max_limit = MAXIMUM

    def __init__(self, *, default: int = DEFAULT, maximum: int = MAXIMUM):
        self.default_limit, self.max_limit = default, maximum
        self._checked = None

    def _query(self, request) -> dict:
        if self._checked is None:
            # a plain dict: an empty ``?offset=`` is a value to refuse, not a field left out (DRF's form rule)
            query = _query(self.default_limit, self.max_limit)(data=request.query_params.dict())
            query.is_valid(raise_exception=True)
            self._checked = query.validated_data
        return self._checked

    def get_limit(self, request) -> int:
        return self._query(request)["limit"]

    def get_offset(self, request) -> int:
        return self._query(request)["offset"]

    def get_paginated_response(self, data) -> Response:
        response = Response(data)
        response["X-Total-Count"] = str(self.count)
        following = self.get_next_link()
        if following:
            response["Link"] = f'<{following}>; rel="next"'
        return response

    def get_paginated_response_schema(self, schema: dict) -> dict:
        return schema  # the body is the array itself


def page(
    request, queryset, serializer_class, *, default: int = DEFAULT, maximum: int = MAXIMUM, context: dict | None = None
) -> Response:
    """One page of ``queryset`` serialized by ``serializer_class`` (for APIViews)."""
    paginator = LimitOffsetHeaders(default=default, maximum=maximum)
    rows = paginator.paginate_queryset(queryset, request)
    return paginator.get_paginated_response(serializer_class(rows, many=True, context=context or {}).data)
