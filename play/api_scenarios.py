"""The scenario API: the library, a player's own scenarios (write, change, versions, delete,
export, import, save an adventure as one), starting a story from one, and reports. Every key
goes through access_scenario (what the caller may read) or access_own_scenario (what they
wrote): anything else is a 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config.serializer_fields import valid
from play import scenario_serializers as ss
from play import serializers as s
from play.api_support import adventure_for
from stories.accounts import ai_settings
from stories.library import scenarios
from stories.models import ScenarioVersion

LIBRARY_PAGE, LIBRARY_PAGE_MAX = 20, 100  # scenarios per page
TAGS = ["scenarios"]


def _own(request, scenario_key):
    return scenarios.access_own_scenario(user_id=request.user.id, key=scenario_key)


def _shown(request, scenario) -> Response:
    return ss.ScenarioSerializer(scenario, context={"user_id": request.user.id}).data


class LibraryView(APIView):
    @extend_schema(
        responses=ss.ScenarioSummarySerializer(many=True),
        parameters=[ss.LibraryQuerySerializer, *paging.parameters(default=LIBRARY_PAGE, maximum=LIBRARY_PAGE_MAX)],
        tags=TAGS,
        summary="Browse the library",
        description="Published scenarios, those above the player's content rating (settings) left out.",
    )
    def get(self, request):
        query = valid(ss.LibraryQuerySerializer, request, query=True)
        max_rating = ai_settings.ai_settings_of(user_id=request.user.id).content_rating
        rows = scenarios.library(max_rating=max_rating, **query)
        return paging.page(request, rows, ss.ScenarioSummarySerializer, default=LIBRARY_PAGE, maximum=LIBRARY_PAGE_MAX)

    @extend_schema(
        request=ss.ScenarioContentSerializer,
        responses={201: ss.ScenarioSerializer},
        tags=TAGS,
        summary="Write a scenario",
        description="A new private scenario (version 1). `${a question?}` in its texts is asked when a story starts.",
    )
    def post(self, request):
        scenario = scenarios.scenario_create(author_id=request.user.id, **valid(ss.ScenarioContentSerializer, request))
        return Response(_shown(request, scenario), status=201)


class MineView(APIView):
    @extend_schema(
        responses=ss.ScenarioSerializer(many=True), parameters=paging.parameters(), tags=TAGS, summary="Your scenarios"
    )
    def get(self, request):
        rows = scenarios.own_scenarios(user_id=request.user.id).select_related("current", "author")
        return paging.page(request, rows, ss.ScenarioSerializer, context={"user_id": request.user.id})


class ScenarioImportView(APIView):
    @extend_schema(
        request=ss.ScenarioDocumentSerializer,
        responses={201: ss.ScenarioSerializer},
        tags=TAGS,
        summary="Import a scenario",
        description="A scenario export (GET .../export/) as a new private scenario of yours.",
    )
    def post(self, request):
        document = valid(ss.ScenarioDocumentSerializer, request)
        scenario = scenarios.scenario_create(author_id=request.user.id, **document["scenario"])
        return Response(_shown(request, scenario), status=201)


class ScenarioDetailView(APIView):
    @extend_schema(responses=ss.ScenarioSerializer, tags=TAGS, summary="Read a scenario")
    def get(self, request, scenario_key):
        return Response(_shown(request, scenarios.access_scenario(user_id=request.user.id, key=scenario_key)))

    @extend_schema(
        request=ss.ScenarioChangeSerializer,
        responses=ss.ScenarioSerializer,
        tags=TAGS,
        summary="Change your scenario",
        description="A change of content saves a new version (stories already started keep theirs); "
        "`visibility` shares it. Publishing is limited per day.",
    )
    def patch(self, request, scenario_key):
        scenario = _own(request, scenario_key)
        changed = scenarios.scenario_change(
            scenario=scenario, **valid(ss.ScenarioChangeSerializer, request, partial=True)
        )
        return Response(_shown(request, changed))

    @extend_schema(responses={204: None}, tags=TAGS, summary="Delete your scenario")
    def delete(self, request, scenario_key):
        scenarios.scenario_delete(scenario=_own(request, scenario_key))
        return Response(status=204)


class LinkView(APIView):
    @extend_schema(
        request=None,
        responses=ss.ScenarioSerializer,
        tags=TAGS,
        summary="Give your scenario a new link",
        description="A new key: the old share link and API address stop working at once.",
    )
    def post(self, request, scenario_key):
        return Response(_shown(request, scenarios.scenario_link_renew(scenario=_own(request, scenario_key))))


class VersionsView(APIView):
    @extend_schema(
        responses=ss.ScenarioVersionSerializer(many=True),
        parameters=paging.parameters(),
        tags=TAGS,
        summary="Your scenario's versions",
    )
    def get(self, request, scenario_key):
        scenario = _own(request, scenario_key)
        rows = ScenarioVersion.objects.filter(scenario=scenario).order_by("-number")
        return paging.page(request, rows, ss.ScenarioVersionSerializer)


class VersionRestoreView(APIView):
    @extend_schema(
        request=None,
        responses=ss.ScenarioSerializer,
        tags=TAGS,
        summary="Bring back an earlier version",
        description="Its content saved as the newest version; stories already started keep theirs.",
    )
    def post(self, request, scenario_key, number):
        scenario = scenarios.scenario_version_restore(scenario=_own(request, scenario_key), number=number)
        return Response(_shown(request, scenario))


class ScenarioExportView(APIView):
    @extend_schema(responses=ss.ScenarioDocumentSerializer, tags=TAGS, summary="Export a scenario as JSON")
    def get(self, request, scenario_key):
        scenario = scenarios.access_scenario(user_id=request.user.id, key=scenario_key)
        return Response(scenarios.scenario_export(scenario=scenario))


class PlayView(APIView):
    @extend_schema(
        request=ss.PlaySerializer,
        responses={201: s.AdventureSerializer},
        tags=TAGS,
        summary="Start a story from a scenario",
        description="A new adventure with the scenario's setup and a copy of its cards, each question answered.",
    )
    def post(self, request, scenario_key):
        scenario = scenarios.access_scenario(user_id=request.user.id, key=scenario_key)
        answers = valid(ss.PlaySerializer, request)["answers"]
        adventure = scenarios.scenario_play(scenario=scenario, user_id=request.user.id, answers=answers)
        return Response(s.AdventureSerializer(adventure).data, status=201)


class ReportView(APIView):
    @extend_schema(
        request=ss.ReportSerializer,
        responses={201: ss.ReportOutSerializer},
        tags=TAGS,
        summary="Report a scenario to the moderators",
    )
    def post(self, request, scenario_key):
        scenario = scenarios.access_scenario(user_id=request.user.id, key=scenario_key)
        report = scenarios.scenario_report(
            scenario=scenario, reporter_id=request.user.id, **valid(ss.ReportSerializer, request)
        )
        return Response(ss.ReportOutSerializer(report).data, status=201)


class SaveAsScenarioView(APIView):
    @extend_schema(
        request=None,
        responses={201: ss.ScenarioSerializer},
        tags=TAGS,
        summary="Save an adventure's setup as a scenario",
        description="Its title, opening, plot essentials, instructions, author's note and cards, as a new "
        "private scenario; never the story played, its summary or its memories.",
    )
    def post(self, request, adventure_id):
        scenario = scenarios.scenario_from_adventure(adventure=adventure_for(request, adventure_id))
        return Response(_shown(request, scenario), status=201)
