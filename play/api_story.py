"""The story API: the story page, undo, edits and deletes, takes, forks,
branches and insights (turns and retries are api_turns). Every adventure id goes through
access_adventure (another user's id is a 404); every write is one call of the
tree or of the turn use case, which ask for the memory pass themselves."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config import serializer_fields as strict
from config.errors import NotFound
from config.serializer_fields import valid as _valid
from play import dry_run
from play import serializers as s
from play.api_support import adventure_for as _adventure
from play.api_support import member_id
from stories.models import Action, Adventure, Branch
from stories.party import secrets
from stories.tree import history, lineage, story_text, writes

STORY_PAGE_DEFAULT = 50  # actions per page
STORY_PAGE_MAX = 200


class _StoryQuery(serializers.Serializer):
    before = serializers.IntegerField(
        min_value=1,
        max_value=2**31 - 1,
        required=False,
        default=None,
        allow_null=True,
        help_text="only actions below this depth",
    )
    limit = serializers.IntegerField(
        min_value=1,
        max_value=STORY_PAGE_MAX,
        required=False,
        default=STORY_PAGE_DEFAULT,
        help_text=f"1-{STORY_PAGE_MAX}, default {STORY_PAGE_DEFAULT}",
    )


class StoryView(APIView):
    @extend_schema(
        parameters=[_StoryQuery],
        responses=s.StoryPageSerializer,
        tags=["story"],
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id, may="watch")
        params = _valid(_StoryQuery, request, query=True)
        branch = lineage.head(adventure)
        rows, next_before = lineage.story_page(
            branch, before_depth=params["before"], limit=params["limit"], viewer=request.user.id
        )
        return Response(
            {
                "branch": branch.pk,
                "tip_depth": branch.tip_depth,
                "next_before": next_before,
                "can_redo": history.can_redo(branch),
                "actions": s.ActionSerializer(rows, many=True, context={"take_counts": lineage.take_counts(rows)}).data,
            }
        )


SEARCH_LIMIT_MAX = 50


class _SearchQuery(serializers.Serializer):
    q = strict.TextField(min_length=1, max_length=200, help_text='words, "a phrase", -word, or')
    limit = serializers.IntegerField(min_value=1, max_value=SEARCH_LIMIT_MAX, required=False, default=20)


class StorySearchView(APIView):
    @extend_schema(
        parameters=[_SearchQuery],
        responses=s.StorySearchSerializer,
        tags=["story"],
        summary="Search the story",
        description="The actions of the current branch's story that match, the best first, with a snippet; "
        "`more` says whether others match past `limit`.",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        params = _valid(_SearchQuery, request, query=True)
        found = story_text.search(
            lineage.head(adventure), params["q"], limit=params["limit"] + 1, viewer=request.user.id
        )
        return Response(
            {"query": params["q"], "results": found[: params["limit"]], "more": len(found) > params["limit"]}
        )


class _ExportQuery(serializers.Serializer):
    type = strict.ChoiceField(choices=["text", "markdown"], required=False, default="text")


class StoryExportView(APIView):
    @extend_schema(
        parameters=[_ExportQuery],
        responses={(200, "text/plain"): OpenApiTypes.STR, (200, "text/markdown"): OpenApiTypes.STR},
        tags=["story"],
        summary="The story as text",
        description="The current branch's story, oldest first, as plain text or Markdown, to read or keep.",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        markdown = _valid(_ExportQuery, request, query=True)["type"] == "markdown"
        body = story_text.written(adventure, lineage.head(adventure), markdown=markdown, viewer=request.user.id)
        kind, ext = ("text/markdown", "md") if markdown else ("text/plain", "txt")
        response = StreamingHttpResponse(body, content_type=f"{kind}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="story-{adventure.pk}.{ext}"'
        return response


class UndoView(APIView):
    @extend_schema(
        request=None,
        responses=s.UndoResultSerializer,
        tags=["story"],
        summary="Undo the last turn",
        description="Takes back the newest turn: the model's reply and the player's action it answered "
        "(a continue, or an action whose reply failed, alone). Redo brings it back.",
    )
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id, may="play")
        return Response(history.turn_undo(adventure_id=adventure.pk, member_id=member_id(request, adventure)))


class RedoView(APIView):
    @extend_schema(
        request=None,
        responses=s.RedoResultSerializer,
        tags=["story"],
        summary="Redo the turn undone last",
        description="Places again the turn undo took back last, while the story still ends where it did; "
        "409 otherwise.",
    )
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id, may="play")
        done = history.turn_redo(adventure_id=adventure.pk, member_id=member_id(request, adventure))
        return Response({**done, "actions": s.ActionSerializer(done["actions"], many=True).data})


def _action(adventure: Adventure, action_id: int, viewer: int) -> Action:
    """The action, unless a moderator hid it (hidden content reaches nobody but staff) or it is a
    secret not told to ``viewer`` (stories.party.secrets): both read as none."""
    action = Action.objects.filter(lineage.seen_q(viewer), pk=action_id, adventure=adventure, hidden=False).first()
    if action is None:
        raise NotFound()
    return action


class ActionView(APIView):
    @extend_schema(responses=s.ActionSerializer, tags=["story"])
    def get(self, request, adventure_id, action_id):
        return Response(s.ActionSerializer(_action(_adventure(request, adventure_id), action_id, request.user.id)).data)

    @extend_schema(request=s.EditInputSerializer, responses=s.ActionSerializer, tags=["story"])
    def patch(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        action = _action(adventure, action_id, request.user.id)
        data = _valid(s.EditInputSerializer, request)
        if "text" not in data:  # an empty patch changes nothing
            return Response(s.ActionSerializer(action).data)
        action = writes.edit(adventure_id=adventure.pk, action_id=action_id, text=data["text"].strip())
        return Response(s.ActionSerializer(action).data)

    @extend_schema(responses={204: None}, tags=["story"])
    def delete(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        _action(adventure, action_id, request.user.id)
        writes.delete(adventure_id=adventure.pk, action_id=action_id)
        return Response(status=204)


class TakesView(APIView):
    def _takes(self, adventure, action, viewer: int):
        branch = lineage.head(adventure)
        if not lineage.on_path(branch, action.branch_id, action.depth):
            branch = Branch.objects.get(pk=action.branch_id)
        takes = [t for t in lineage.takes_at(branch, action.depth) if not t.hidden and secrets.may_read(t, viewer)]
        counts = {(t.branch_id, t.depth): len(takes) for t in takes}
        return {
            "depth": action.depth,
            "takes": s.ActionSerializer(takes, many=True, context={"take_counts": counts}).data,
        }

    @extend_schema(responses=s.TakesSerializer, tags=["story"])
    def get(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        return Response(self._takes(adventure, _action(adventure, action_id, request.user.id), request.user.id))

    @extend_schema(request=s.TakeSelectSerializer, responses=s.TakesSerializer, tags=["story"])
    def post(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        action = _action(adventure, action_id, request.user.id)
        take_id = _valid(s.TakeSelectSerializer, request)["take_id"]
        branch = lineage.head(adventure)
        takes = {t.pk for t in lineage.takes_at(branch, action.depth) if not t.hidden}
        if take_id not in takes or not lineage.on_path(branch, action.branch_id, action.depth):
            raise NotFound("take_id is not a take of this action on the current branch")
        selected = writes.take_select(adventure_id=adventure.pk, action_id=take_id)
        return Response(self._takes(adventure, selected, request.user.id))


class ForkView(APIView):
    @extend_schema(request=s.ForkInputSerializer, responses={201: s.BranchSerializer}, tags=["branches"])
    def post(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        _action(adventure, action_id, request.user.id)
        data = _valid(s.ForkInputSerializer, request)
        branch = writes.fork(
            adventure_id=adventure.pk, action_id=action_id, name=data["name"], checkout=data["checkout"]
        )
        adventure.refresh_from_db()
        return Response(s.BranchSerializer(branch, context={"head_id": adventure.head_branch_id}).data, status=201)


# ---------------------------------------------------------------------------- branches


def _branch(adventure: Adventure, branch_id: int) -> Branch:
    branch = Branch.objects.filter(pk=branch_id, adventure=adventure, internal=False).first()
    if branch is None:
        raise NotFound()
    return branch


class BranchListView(APIView):
    @extend_schema(responses=s.BranchSerializer(many=True), parameters=paging.parameters(), tags=["branches"])
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        branches = Branch.objects.filter(adventure=adventure, internal=False).order_by("id")
        return paging.page(request, branches, s.BranchSerializer, context={"head_id": adventure.head_branch_id})


class BranchDetailView(APIView):
    @extend_schema(request=s.BranchRenameSerializer, responses=s.BranchSerializer, tags=["branches"])
    def patch(self, request, adventure_id, branch_id):
        adventure = _adventure(request, adventure_id)
        branch = _branch(adventure, branch_id)
        name = _valid(s.BranchRenameSerializer, request).get("name")
        if name is not None:  # an empty patch changes nothing
            branch = writes.branch_rename(adventure_id=adventure.pk, branch_id=branch_id, name=name)
        return Response(s.BranchSerializer(branch, context={"head_id": adventure.head_branch_id}).data)

    @extend_schema(responses={204: None}, tags=["branches"])
    def delete(self, request, adventure_id, branch_id):
        adventure = _adventure(request, adventure_id)
        _branch(adventure, branch_id)
        writes.branch_delete(adventure_id=adventure.pk, branch_id=branch_id)
        return Response(status=204)


class BranchCheckoutView(APIView):
    @extend_schema(request=None, responses=s.BranchSerializer, tags=["branches"])
    def post(self, request, adventure_id, branch_id):
        adventure = _adventure(request, adventure_id)
        _branch(adventure, branch_id)
        branch = writes.checkout(adventure_id=adventure.pk, branch_id=branch_id)
        return Response(s.BranchSerializer(branch, context={"head_id": branch.pk}).data)


class _InsightsQuery(serializers.Serializer):
    turn = strict.ChoiceField(
        choices=["next", "last"],
        required=False,
        default="next",
        help_text="next: a dry run of the next turn's prompt; last: the prompt the last turn sent (6 hours)",
    )


class InsightsView(APIView):
    @extend_schema(
        parameters=[_InsightsQuery],
        responses=s.ContextSerializer,
        tags=["story"],
        summary="The prompt, part by part",
        description="Each part's text, tokens and reason in the order the model reads them: the next "
        "turn's (a dry run, nothing spent) or the last turn's as it was sent.",
    )
    def get(self, request, adventure_id):
        _adventure(request, adventure_id)
        if _valid(_InsightsQuery, request, query=True)["turn"] == "last":
            return Response(dry_run.last_insights(user_id=request.user.id, adventure_id=adventure_id))
        return Response(dry_run.insights(user_id=request.user.id, adventure_id=adventure_id).as_dict())
