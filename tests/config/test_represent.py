"""config.serializer_fields.represent: a hot answer's serializer built once per thread gives exactly
what a serializer built for the call gives, whatever the calls before it on any thread asked."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.utils import timezone

from config.serializer_fields import represent
from stories.models import Action
from stories.serializers import ActionSerializer

pytestmark = pytest.mark.django_db


def test_each_call_answers_as_a_serializer_of_its_own_would_with_its_own_context():
    now = timezone.now()
    nodes = [
        Action(id=n, adventure_id=1, branch_id=1, depth=n, kind="ai", text=f"node {n}", created_at=now) for n in (1, 2)
    ]
    asks = [{"take_counts": {(1, 1): 3}}, {}, {"take_counts": {(1, 2): 2}}, None] * 5

    def answer(context):
        return represent(ActionSerializer, nodes, context=context, many=True), context

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(answer, asks))
    for got, context in answers:
        assert got == ActionSerializer(nodes, many=True, context=context or {}).data
    takes = [[node["take_count"] for node in got] for got, _ in answers[:4]]
    assert takes == [[3, 1], [1, 1], [1, 2], [1, 1]], "each answer counted its own takes, none an earlier one's"
