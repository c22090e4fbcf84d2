from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from workers.status import pool_status


class PoolStatusView(APIView):
    """The worker pool as `manage.py workers_status` shows it (staff only)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        responses=inline_serializer(
            "PoolStatus",
            {"queue_depth": serializers.IntegerField(allow_null=True), "adventures_behind": serializers.IntegerField()},
        ),
        tags=["operators"],
    )
    def get(self, request):
        return Response(pool_status())
