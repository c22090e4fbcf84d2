"""The story API: views parse, call one service, serialize. Every adventure id
goes through access_adventure (another user's id is a 404)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model, login, logout
from django.db import transaction
from django.db.models import Count
from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from memory import bank, embedder, memories
from stories import accounts, adventures, auth, cards, limits, lineage, providers, tree, turns
from stories import serializers as s
from stories.models import Action, Adventure, Branch, ProviderCall, StoryCard
from workers.tasks import enqueue_post_turn

User = get_user_model()

STORY_PAGE_DEFAULT = 50  # actions per page
STORY_PAGE_MAX = 200
DEBUG_LOG_SIZE = 30  # provider calls shown to a user


def _adventure(request, adventure_id) -> Adventure:
    return adventures.access_adventure(user_id=request.user.id, adventure_id=adventure_id)


def _valid(serializer_class, request, **kwargs):
    serializer = serializer_class(data=request.data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _take_counts(actions: list[Action]) -> dict:
    if not actions:
        return {}
    keys = {(a.branch_id, a.depth) for a in actions}
    rows = (Action.objects.filter(branch_id__in={b for b, _ in keys}, depth__in={d for _, d in keys})
            .values("branch_id", "depth").annotate(n=Count("id")))
    return {(r["branch_id"], r["depth"]): r["n"] for r in rows if (r["branch_id"], r["depth"]) in keys}


# ---------------------------------------------------------------------------- auth


class SignupView(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=s.SignupSerializer, responses={201: s.TokenSerializer}, tags=["auth"])
    def post(self, request):
        data = _valid(s.SignupSerializer, request)
        limits.signup(ip=auth.client_ip(request))
        user = User.objects.create_user(username=data["username"], password=data["password"],
                                        email=data.get("email", ""))
        token = Token.objects.create(user=user)
        login(request, user, backend=auth.BACKEND)
        return Response({"token": token.key, "username": user.username}, status=201)


class LoginView(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=s.LoginSerializer, responses={200: s.TokenSerializer}, tags=["auth"])
    def post(self, request):
        data = _valid(s.LoginSerializer, request)
        user = authenticate(request, username=data["username"], password=data["password"])
        if user is None:
            if auth.login_throttled(request):
                return Response({"detail": auth.THROTTLED}, status=429,
                                headers={"Retry-After": str(settings.LOGIN_FAILURE_WINDOW_S)})
            return Response({"detail": "wrong username or password"}, status=401,
                            headers={"WWW-Authenticate": "Token"})
        token, _ = Token.objects.get_or_create(user=user)
        login(request, user)
        return Response({"token": token.key, "username": user.username})


class LogoutView(APIView):
    @extend_schema(request=None, responses={204: None}, tags=["auth"])
    def post(self, request):
        Token.objects.filter(user=request.user).delete()
        logout(request)
        return Response(status=204)


class PasswordView(APIView):
    @extend_schema(request=s.PasswordChangeSerializer, responses={200: s.TokenSerializer}, tags=["auth"],
                   description="Change your password. Every other session and API token of the account ends; "
                               "the answer carries this client's new token.")
    def post(self, request):
        data = _valid(s.PasswordChangeSerializer, request, context={"user": request.user})
        token = auth.password_change(request=request, old_password=data["old_password"],
                                     new_password=data["new_password"])
        return Response({"token": token, "username": request.user.username})


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer, tags=["auth"])
    def get(self, request):
        return Response({"id": request.user.id, "username": request.user.username, "email": request.user.email})


# ---------------------------------------------------------------------------- settings


class SettingsView(APIView):
    @extend_schema(responses=s.AISettingsSerializer, tags=["settings"])
    def get(self, request):
        return Response(s.AISettingsSerializer(accounts.ai_settings_get(user_id=request.user.id)).data)

    @extend_schema(request=s.AISettingsSerializer, responses=s.AISettingsSerializer, tags=["settings"])
    def patch(self, request):
        data = _valid(s.AISettingsSerializer, request, partial=True)
        api_key = data.pop("api_key", None)
        before = embedder.active_model(user_id=request.user.id)
        obj = accounts.ai_settings_update(user_id=request.user.id, api_key=api_key, **data)
        if embedder.active_model(user_id=request.user.id) != before:
            # the bank is re-embedded with the new model in the background
            for adventure_id in bank.vectors_clear_other_models(owner_id=request.user.id):
                enqueue_post_turn(adventure_id)
        return Response(s.AISettingsSerializer(obj).data)

    put = patch


class SettingsTestView(APIView):
    @extend_schema(request=None, responses={200: s.TestConnectionResultSerializer}, tags=["settings"])
    def post(self, request):
        conn = accounts.connection_for_test(user_id=request.user.id)
        result = providers.complete(
            conn=conn, messages=[{"role": "user", "content": "Reply with the word: ok"}], max_tokens=5,
            temperature=0.0, user_id=request.user.id, purpose=ProviderCall.Purpose.TEST,
        )
        return Response({"ok": True, "model": result.model, "latency_ms": result.latency_ms, "reply": result.text[:100]})


class DebugRequestsView(APIView):
    @extend_schema(responses=s.ProviderCallSerializer(many=True), tags=["settings"])
    def get(self, request):
        calls = ProviderCall.objects.filter(user=request.user).order_by("-created_at", "-id")[:DEBUG_LOG_SIZE]
        return Response(s.ProviderCallSerializer(calls, many=True).data)


# ---------------------------------------------------------------------------- adventures


class AdventureListView(APIView):
    @extend_schema(responses=s.AdventureSerializer(many=True), parameters=paging.parameters(), tags=["adventures"])
    def get(self, request):
        qs = (Adventure.objects.filter(owner=request.user, hidden=False).select_related("head_branch")
              .order_by("-updated_at", "-id"))
        return paging.page(request, qs, s.AdventureSerializer)

    @extend_schema(request=s.AdventureSerializer, responses={201: s.AdventureSerializer}, tags=["adventures"])
    def post(self, request):
        data = _valid(s.AdventureSerializer, request)
        summary = data.pop("story_summary", "")
        adventure = adventures.adventure_create(owner_id=request.user.id, **data)
        if summary:
            memories.summary_set(adventure=adventure, text=summary)
        adventure.refresh_from_db()
        return Response(s.AdventureSerializer(adventure).data, status=201)


class AdventureDetailView(APIView):
    @extend_schema(responses=s.AdventureSerializer, tags=["adventures"])
    def get(self, request, adventure_id):
        return Response(s.AdventureSerializer(_adventure(request, adventure_id)).data)

    @extend_schema(request=s.AdventureUpdateSerializer, responses=s.AdventureSerializer, tags=["adventures"])
    def patch(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = _valid(s.AdventureUpdateSerializer, request, partial=True)
        if "story_summary" in data:  # the player's own summary: it follows the story tree
            adventure = memories.summary_set(adventure=adventure, text=data.pop("story_summary").strip())
        for name, value in data.items():
            setattr(adventure, name, value)
        if data:  # only the fields sent: a save must not move the head or overwrite the worker's summary
            adventure.save(update_fields=[*data, "updated_at"])
        return Response(s.AdventureSerializer(adventure).data)

    @extend_schema(responses={204: None}, tags=["adventures"])
    def delete(self, request, adventure_id):
        _adventure(request, adventure_id).delete()
        return Response(status=204)


class AdventureExportView(APIView):
    @extend_schema(responses={200: inline_serializer("AdventureExport", {"format": serializers.CharField()})},
                   tags=["adventures"])
    def get(self, request, adventure_id):
        return Response(adventures.adventure_export(adventure=_adventure(request, adventure_id)))


class AdventureImportView(APIView):
    @extend_schema(request=inline_serializer("AdventureImport", {"format": serializers.ChoiceField(
                       choices=[adventures.EXPORT_FORMAT], help_text="an export of this site, as GET .../export/ gives")}),
                   responses={201: s.AdventureSerializer}, tags=["adventures"])
    def post(self, request):
        limits.adventure_import(user_id=request.user.id)
        adventure = adventures.adventure_import(owner_id=request.user.id, data=request.data)
        if adventure.story_summary:
            adventure = memories.summary_set(adventure=adventure, text=adventure.story_summary)
        enqueue_post_turn(adventure.pk)
        return Response(s.AdventureSerializer(adventure).data, status=201)


# ---------------------------------------------------------------------------- story and turns


class _StoryQuery(serializers.Serializer):
    before = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False, default=None, allow_null=True,
                                      help_text="only actions below this depth")
    limit = serializers.IntegerField(min_value=1, max_value=STORY_PAGE_MAX, required=False, default=STORY_PAGE_DEFAULT,
                                     help_text=f"1-{STORY_PAGE_MAX}, default {STORY_PAGE_DEFAULT}")


class StoryView(APIView):
    @extend_schema(
        parameters=[_StoryQuery],
        responses=s.StoryPageSerializer, tags=["story"],
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        params = _valid_query(request)
        branch = Branch.objects.get(pk=adventure.head_branch_id)
        rows, next_before = lineage.story_page(branch, before_depth=params["before"], limit=params["limit"])
        return Response({
            "branch": branch.pk, "tip_depth": branch.tip_depth, "next_before": next_before,
            "actions": s.ActionSerializer(rows, many=True, context={"take_counts": _take_counts(rows)}).data,
        })


def _valid_query(request):
    serializer = _StoryQuery(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _turn_response(result: turns.TurnResult, *, retried: bool = False) -> Response:
    # A new node has one take; only a retry adds a take to an existing node.
    counts = _take_counts(result.actions) if retried else {}
    return Response({
        "actions": s.ActionSerializer(result.actions, many=True, context={"take_counts": counts}).data,
        "context": result.context.as_dict(),
        "usage": {"model": result.completion.model, "prompt_tokens": result.completion.prompt_tokens,
                  "completion_tokens": result.completion.completion_tokens,
                  "latency_ms": result.completion.latency_ms, "demo": result.demo},
        "memories": [{"id": m.id, "text": m.text, "similarity": m.similarity, "pinned": m.pinned}
                     for m in result.memories if m.id in result.context.memory_ids],
        "recall_note": result.context.recall_note,
    }, status=201)


def _turn_failed(exc: turns.TurnFailed) -> Response:
    from stories.errors import domain_error_response

    response = domain_error_response(exc.error)
    response.data["stored_actions"] = s.ActionSerializer(exc.stored, many=True).data
    response.data["hint"] = "your action was kept; fix the problem and use retry to get the reply"
    return response


class TurnView(APIView):
    @extend_schema(request=s.TURN_INPUT_SCHEMA, responses={201: s.TurnResultSerializer}, tags=["story"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = _valid(s.TurnInputSerializer, request)
        limits.turn(user_id=request.user.id)
        try:
            result = turns.play(user_id=request.user.id, adventure=adventure, mode=data["mode"],
                                text=data["text"].strip())
        except turns.TurnFailed as exc:
            enqueue_post_turn(adventure_id)
            return _turn_failed(exc)
        enqueue_post_turn(adventure_id)
        return _turn_response(result)


class RetryView(APIView):
    @extend_schema(request=None, responses={201: s.TurnResultSerializer}, tags=["story"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        limits.turn(user_id=request.user.id)
        try:
            result = turns.retry(user_id=request.user.id, adventure=adventure)
        except turns.TurnFailed as exc:
            return _turn_failed(exc)
        enqueue_post_turn(adventure_id)
        return _turn_response(result, retried=True)


class UndoView(APIView):
    @extend_schema(request=None, responses=s.UndoResultSerializer, tags=["story"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        depth = tree.undo(adventure_id=adventure.pk)
        enqueue_post_turn(adventure.pk)
        return Response({"removed_depth": depth, "tip_depth": depth - 1})


def _action(adventure: Adventure, action_id: int) -> Action:
    """The action, unless a moderator hid it: hidden content reaches nobody but staff."""
    action = Action.objects.filter(pk=action_id, adventure=adventure, hidden=False).first()
    if action is None:
        raise Http404
    return action


class ActionView(APIView):
    @extend_schema(responses=s.ActionSerializer, tags=["story"])
    def get(self, request, adventure_id, action_id):
        return Response(s.ActionSerializer(_action(_adventure(request, adventure_id), action_id)).data)

    @extend_schema(request=s.EditInputSerializer, responses=s.ActionSerializer, tags=["story"])
    def patch(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        action = _action(adventure, action_id)
        data = _valid(s.EditInputSerializer, request)
        if "text" not in data:  # an empty patch changes nothing
            return Response(s.ActionSerializer(action).data)
        action = tree.edit(adventure_id=adventure.pk, action_id=action_id, text=data["text"].strip())
        enqueue_post_turn(adventure.pk)
        return Response(s.ActionSerializer(action).data)

    @extend_schema(responses={204: None}, tags=["story"])
    def delete(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        _action(adventure, action_id)
        tree.delete(adventure_id=adventure.pk, action_id=action_id)
        enqueue_post_turn(adventure.pk)
        return Response(status=204)


class TakesView(APIView):
    def _takes(self, adventure, action):
        branch = Branch.objects.get(pk=adventure.head_branch_id)
        if not lineage.on_path(branch, action):
            branch = Branch.objects.get(pk=action.branch_id)
        takes = [t for t in lineage.takes_at(branch, action.depth) if not t.hidden]
        counts = {(t.branch_id, t.depth): len(takes) for t in takes}
        return {"depth": action.depth,
                "takes": s.ActionSerializer(takes, many=True, context={"take_counts": counts}).data}

    @extend_schema(responses=s.TakesSerializer, tags=["story"])
    def get(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        return Response(self._takes(adventure, _action(adventure, action_id)))

    @extend_schema(request=s.TakeSelectSerializer, responses=s.TakesSerializer, tags=["story"])
    def post(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        action = _action(adventure, action_id)
        take_id = _valid(s.TakeSelectSerializer, request)["take_id"]
        branch = Branch.objects.get(pk=adventure.head_branch_id)
        if take_id not in {t.pk for t in lineage.takes_at(branch, action.depth) if not t.hidden} or not lineage.on_path(branch, action):
            raise NotFound("take_id is not a take of this action on the current branch")
        selected = tree.take_select(adventure_id=adventure.pk, action_id=take_id)
        enqueue_post_turn(adventure.pk)
        return Response(self._takes(adventure, selected))


class ForkView(APIView):
    @extend_schema(request=s.ForkInputSerializer, responses={201: s.BranchSerializer}, tags=["branches"])
    def post(self, request, adventure_id, action_id):
        adventure = _adventure(request, adventure_id)
        _action(adventure, action_id)
        data = _valid(s.ForkInputSerializer, request)
        branch = tree.fork(adventure_id=adventure.pk, action_id=action_id, name=data["name"], checkout=data["checkout"])
        enqueue_post_turn(adventure.pk)
        adventure.refresh_from_db()
        return Response(s.BranchSerializer(branch, context={"head_id": adventure.head_branch_id}).data, status=201)


# ---------------------------------------------------------------------------- branches


def _branch(adventure: Adventure, branch_id: int) -> Branch:
    branch = Branch.objects.filter(pk=branch_id, adventure=adventure, internal=False).first()
    if branch is None:
        raise Http404
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
            branch = tree.branch_rename(adventure_id=adventure.pk, branch_id=branch_id, name=name)
        return Response(s.BranchSerializer(branch, context={"head_id": adventure.head_branch_id}).data)

    @extend_schema(responses={204: None}, tags=["branches"])
    def delete(self, request, adventure_id, branch_id):
        adventure = _adventure(request, adventure_id)
        _branch(adventure, branch_id)
        tree.branch_delete(adventure_id=adventure.pk, branch_id=branch_id)
        return Response(status=204)


class BranchCheckoutView(APIView):
    @extend_schema(request=None, responses=s.BranchSerializer, tags=["branches"])
    def post(self, request, adventure_id, branch_id):
        adventure = _adventure(request, adventure_id)
        _branch(adventure, branch_id)
        branch = tree.checkout(adventure_id=adventure.pk, branch_id=branch_id)
        enqueue_post_turn(adventure.pk)
        return Response(s.BranchSerializer(branch, context={"head_id": branch.pk}).data)


# ---------------------------------------------------------------------------- cards


class CardListView(APIView):
    @extend_schema(responses=s.CardSerializer(many=True), parameters=paging.parameters(), tags=["cards"])
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        return paging.page(request, StoryCard.objects.filter(adventure=adventure).order_by("id"), s.CardSerializer)

    @extend_schema(request=s.CardInputSerializer, responses={201: s.CardSerializer}, tags=["cards"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = _valid(s.CardInputSerializer, request)
        with transaction.atomic():
            Adventure.objects.select_for_update().get(pk=adventure.pk)
            cards.card_limit_check(adventure=adventure, adding=1)
            card = StoryCard.objects.create(adventure=adventure, **data)
        return Response(s.CardSerializer(card).data, status=201)


def _card(adventure: Adventure, card_id: int) -> StoryCard:
    card = StoryCard.objects.filter(pk=card_id, adventure=adventure).first()
    if card is None:
        raise Http404
    return card


class CardDetailView(APIView):
    @extend_schema(responses=s.CardSerializer, tags=["cards"])
    def get(self, request, adventure_id, card_id):
        return Response(s.CardSerializer(_card(_adventure(request, adventure_id), card_id)).data)

    @extend_schema(request=s.CardInputSerializer, responses=s.CardSerializer, tags=["cards"])
    def patch(self, request, adventure_id, card_id):
        card = _card(_adventure(request, adventure_id), card_id)
        data = _valid(s.CardInputSerializer, request, partial=True)
        for name, value in data.items():
            setattr(card, name, value)
        card.save()
        return Response(s.CardSerializer(card).data)

    @extend_schema(responses={204: None}, tags=["cards"])
    def delete(self, request, adventure_id, card_id):
        _card(_adventure(request, adventure_id), card_id).delete()
        return Response(status=204)


class CardImportView(APIView):
    @extend_schema(request=s.AIDungeonCardsSerializer,
                   responses={201: s.CardSerializer(many=True)}, tags=["cards"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        created = cards.import_aidungeon(adventure=adventure, data=request.data)
        return Response(s.CardSerializer(created, many=True).data, status=201)


class CardExportView(APIView):
    @extend_schema(responses={200: inline_serializer("AIDungeonCard", {"keys": serializers.CharField(),
                                                                         "value": serializers.CharField()}, many=True)},
                   tags=["cards"])
    def get(self, request, adventure_id):
        return Response(cards.export_aidungeon(adventure=_adventure(request, adventure_id)))


class InsightsView(APIView):
    @extend_schema(responses=s.ContextSerializer, tags=["story"])
    def get(self, request, adventure_id):
        _adventure(request, adventure_id)
        return Response(turns.insights(user_id=request.user.id, adventure_id=adventure_id).as_dict())
