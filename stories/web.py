"""The browser pages: server-rendered shells; the play and settings pages drive
the JSON API with a little plain JavaScript (no build step)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from stories.adventures import access_adventure, adventure_create
from stories import limits
from stories.cards import clean_keys
from stories.errors import InvalidRequest
from stories.models import ACTION_TEXT_MAX, AUTHORS_NOTE_MAX, LONG_TEXT_MAX, Adventure


class LoginView(auth_views.LoginView):
    """Django's login page, refusing a username/address pair after too many failures."""

    def post(self, request, *args, **kwargs):
        username = request.POST.get("username", "")
        ip = request.META.get("REMOTE_ADDR", "")
        if limits.login_blocked(username=username, ip=ip):
            form = self.get_form()
            form.errors.clear()
            response = self.render_to_response(self.get_context_data(form=form, blocked=True))
            response.status_code = 429
            response["Retry-After"] = str(settings.LOGIN_FAILURE_WINDOW_S)
            return response
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200:  # the form came back: wrong credentials
            limits.login_failed(username=username, ip=ip)
        return response


def home(request):
    return redirect("web-adventures" if request.user.is_authenticated else "login")


def signup(request):
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("web-adventures")
    return render(request, "stories/signup.html", {"form": form}, status=400 if form.errors else 200)


class NewAdventureForm(forms.Form):
    title = forms.CharField(max_length=200)
    persona_name = forms.CharField(max_length=100, required=False)
    persona_pronouns = forms.CharField(max_length=40, required=False)
    persona_description = forms.CharField(max_length=LONG_TEXT_MAX, required=False)
    plot_essentials = forms.CharField(max_length=LONG_TEXT_MAX, required=False)
    authors_note = forms.CharField(max_length=AUTHORS_NOTE_MAX, required=False)
    ai_instructions = forms.CharField(max_length=LONG_TEXT_MAX, required=False)
    opening = forms.CharField(max_length=ACTION_TEXT_MAX)
    card_name = forms.CharField(max_length=100, required=False)
    card_keys = forms.CharField(max_length=2000, required=False)
    card_entry = forms.CharField(max_length=4000, required=False)


ADVENTURES_PER_PAGE = 50


@login_required
def adventures(request):
    form = NewAdventureForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        card = {k[5:]: data.pop(k) for k in ("card_name", "card_keys", "card_entry")}
        cards = []
        if card["name"]:
            try:
                cards = [{"type": "character", "name": card["name"], "keys": clean_keys(card["keys"]),
                          "entry": card["entry"]}]
            except InvalidRequest as exc:
                form.add_error(None, str(exc))
        if not form.errors:
            adventure = adventure_create(owner_id=request.user.id, cards=cards, **data)
            return redirect("web-play", adventure.pk)
    rows = Adventure.objects.filter(owner=request.user, hidden=False).order_by("-updated_at", "-id")
    page = Paginator(rows, ADVENTURES_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "stories/adventures.html", {"adventures": page.object_list, "page": page, "form": form},
                  status=400 if form.errors else 200)


@login_required
@require_POST
def adventure_delete(request, adventure_id):
    access_adventure(user_id=request.user.id, adventure_id=adventure_id).delete()
    return redirect("web-adventures")


@login_required
def play(request, adventure_id):
    adventure = access_adventure(user_id=request.user.id, adventure_id=adventure_id)
    return render(request, "stories/play.html", {"adventure": adventure})


@login_required
def settings_page(request):
    return render(request, "stories/settings.html")
