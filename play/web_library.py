"""The library's pages: browse and search published scenarios, a scenario's page (start a story
with its questions answered, report it; its author shares, exports and deletes it), the
player's own scenarios with what moderators told them, and the editor (which drives the JSON
API with play/static/play/scenarios.js). Every key goes through access_scenario or
access_own_scenario, as in the API."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from config.errors import DomainError
from stories.accounts import ai_settings
from stories.library import scenarios
from stories.models import RATING_ORDER, Rating, Scenario, ScenarioReport, ScenarioVersion

LIBRARY_PAGE = 20  # scenarios a page


class LibraryForm(forms.Form):
    q = forms.CharField(max_length=200, required=False)
    tag = forms.CharField(max_length=30, required=False)
    rating = forms.ChoiceField(choices=[("", "any rating"), *Rating.choices], required=False)
    sort = forms.ChoiceField(
        choices=[("", "best match / newest"), ("new", "newest"), ("played", "most played")], required=False
    )


@login_required
def library(request):
    form = LibraryForm(request.GET or None)
    query = form.cleaned_data if form.is_valid() else {}
    max_rating = ai_settings.ai_settings_of(user_id=request.user.id).content_rating
    rows = scenarios.library(max_rating=max_rating, **query)
    page = Paginator(rows, LIBRARY_PAGE).get_page(request.GET.get("page"))
    keep = request.GET.copy()
    keep.pop("page", None)
    context = {"form": form, "page": page, "scenarios": page.object_list, "query": keep.urlencode()}
    context["max_rating"] = max_rating
    context["told"] = Scenario.objects.filter(author_id=request.user.id).exclude(moderator_notice="").count()
    return render(request, "play/library.html", context, status=400 if form.errors else 200)


@login_required
def mine(request):
    rows = scenarios.own_scenarios(user_id=request.user.id)
    page = Paginator(rows, LIBRARY_PAGE).get_page(request.GET.get("page"))
    return render(request, "play/scenarios_mine.html", {"page": page, "scenarios": page.object_list})


def _page(request, scenario: Scenario, *, status: int = 200, **extra):
    version = scenario.current
    is_author = scenario.author_id == request.user.id
    max_rating = ai_settings.ai_settings_of(user_id=request.user.id).content_rating
    context = {
        "max_rating": max_rating,
        "above_preference": RATING_ORDER.index(scenario.rating) > RATING_ORDER.index(max_rating),
        "scenario": scenario,
        "version": version,
        "questions": list(enumerate(scenarios.placeholders_of(scenarios.content_of(version)))),
        "is_author": is_author,
        "reasons": ScenarioReport.Reason.choices,
        "visibilities": Scenario.Visibility.choices,
        "versions": ScenarioVersion.objects.filter(scenario=scenario).order_by("-number")[:10] if is_author else [],
        **extra,
    }
    return render(request, "play/scenario.html", context, status=status)


def _refused(request, scenario: Scenario, exc: DomainError, where: str, **extra):
    """The scenario page again with what the domain said under the form it came from (``where``),
    its status and headers (a 429's Retry-After)."""
    response = _page(request, scenario, status=exc.status, **{where: exc.message}, **extra)
    for name, value in exc.headers().items():
        response[name] = value
    return response


@login_required
def scenario_page(request, scenario_key):
    scenario = scenarios.access_scenario(user_id=request.user.id, key=scenario_key)
    return _page(request, scenario, reported=request.GET.get("reported") == "1")


@login_required
@require_POST
def scenario_play(request, scenario_key):
    scenario = scenarios.access_scenario(user_id=request.user.id, key=scenario_key)
    questions = scenarios.placeholders_of(scenarios.content_of(scenario.current))
    answers = {q: request.POST.get(f"answer_{i}", "")[: scenarios.ANSWER_MAX] for i, q in enumerate(questions)}
    try:
        adventure = scenarios.scenario_play(scenario=scenario, user_id=request.user.id, answers=answers)
    except DomainError as exc:
        return _refused(request, scenario, exc, "play_error", answers=answers)
    return redirect("web-play", adventure.pk)


@login_required
@require_POST
def scenario_report(request, scenario_key):
    scenario = scenarios.access_scenario(user_id=request.user.id, key=scenario_key)
    reason = request.POST.get("reason", "")
    if reason not in ScenarioReport.Reason.values:
        return _page(request, scenario, status=400, report_error="choose a reason from the list")
    try:
        scenarios.scenario_report(
            scenario=scenario, reporter_id=request.user.id, reason=reason, text=request.POST.get("text", "")[:1000]
        )
    except DomainError as exc:
        return _refused(request, scenario, exc, "report_error")
    return redirect(f"/library/s/{scenario.key}/?reported=1")


@login_required
@require_POST
def scenario_visibility(request, scenario_key):
    scenario = scenarios.access_own_scenario(user_id=request.user.id, key=scenario_key)
    visibility = request.POST.get("visibility", "")
    if visibility not in Scenario.Visibility.values:
        return _page(request, scenario, status=400, share_error="choose private, unlisted or published")
    try:
        scenario = scenarios.scenario_change(scenario=scenario, visibility=visibility)
    except DomainError as exc:
        return _refused(request, scenario, exc, "share_error")
    return redirect("web-scenario", scenario.key)


@login_required
@require_POST
def scenario_restore(request, scenario_key, number):
    scenario = scenarios.access_own_scenario(user_id=request.user.id, key=scenario_key)
    scenarios.scenario_version_restore(scenario=scenario, number=number)
    return redirect("web-scenario", scenario.key)


@login_required
@require_POST
def scenario_link(request, scenario_key):
    scenario = scenarios.access_own_scenario(user_id=request.user.id, key=scenario_key)
    return redirect("web-scenario", scenarios.scenario_link_renew(scenario=scenario).key)


@login_required
@require_POST
def scenario_delete(request, scenario_key):
    scenarios.scenario_delete(scenario=scenarios.access_own_scenario(user_id=request.user.id, key=scenario_key))
    return redirect("web-scenarios-mine")


@login_required
def editor(request, scenario_key=None):
    """The editor's shell: scenarios.js reads the scenario from the API and saves through it."""
    scenario = scenarios.access_own_scenario(user_id=request.user.id, key=scenario_key) if scenario_key else None
    return render(request, "play/scenario_edit.html", {"scenario": scenario, "ratings": Rating.choices})
