"""The browser pages: server-rendered shells; the play and settings pages drive
the JSON API with a little plain JavaScript (no build step)."""

from __future__ import annotations

from django import forms
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST, require_safe

from config.errors import InvalidRequest, RateLimited
from play import changes
from stories import limits
from stories.accounts import auth
from stories.adventures import access_adventure
from stories.cards import clean_keys
from stories.models import ACTION_TEXT_MAX, AUTHORS_NOTE_MAX, LONG_TEXT_MAX, Adventure
from stories.party import members
from stories.prompt import sampling
from stories.tree import writes


class LoginView(auth_views.LoginView):
    """Django's login page behind the shared login throttle (stories.accounts.auth)."""

    authentication_form = auth.LoginForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        return auth.throttled_response(response) if form.has_error("__all__", "throttled") else response


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's page; the form checks the current password through the throttle
    and saving the new one ends the account's API tokens and other sessions."""

    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("web-password-changed")
    form_class = auth.PasswordChangeForm

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.has_error("old_password", "throttled"):
            return auth.throttled_response(response)
        response.status_code = 400
        return response


class PasswordResetView(auth_views.PasswordResetView):
    """Asks for an email address; sends a one-time link (rate limited per address)."""

    template_name = "accounts/password_reset.html"
    email_template_name = "accounts/password_reset_email.txt"
    subject_template_name = "accounts/password_reset_subject.txt"
    success_url = reverse_lazy("web-password-reset-sent")

    def form_valid(self, form):
        try:
            limits.password_reset(ip=auth.client_ip(self.request))
        except RateLimited as exc:
            form.add_error(None, str(exc))
            response = self.form_invalid(form)
            response.status_code = 429
            response["Retry-After"] = str(exc.retry_after)
            return response
        return super().form_valid(form)


def home(request):
    """A visitor reads what the site is; a player with stories goes back to them; a newcomer to the
    library, to start one."""
    if not request.user.is_authenticated:
        return render(request, "play/welcome.html")
    has_stories = Adventure.objects.filter(owner=request.user, hidden=False).exists()
    return redirect("web-adventures" if has_stories else "web-library")


class SignupForm(UserCreationForm):
    email = forms.EmailField(required=False, max_length=254)

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST":
        try:  # before the form is read: a taken and a free name answer alike past the limit
            limits.signup_open(ip=auth.client_ip(request))
            if form.is_valid():
                limits.signup(ip=auth.client_ip(request))
        except RateLimited as exc:
            form = SignupForm(initial={k: request.POST.get(k, "") for k in ("username", "email")})  # not validated
            response = render(request, "play/signup.html", {"form": form, "refused": str(exc)}, status=429)
            response["Retry-After"] = str(exc.retry_after)
            return response
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend=auth.BACKEND)
        return redirect("web-library")
    return render(request, "play/signup.html", {"form": form}, status=400 if form.errors else 200)


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
                cards = [
                    {
                        "type": "character",
                        "name": card["name"],
                        "keys": clean_keys(card["keys"]),
                        "entry": card["entry"],
                    }
                ]
            except InvalidRequest as exc:
                form.add_error(None, str(exc))
        if not form.errors:
            adventure = changes.adventure_create(owner_id=request.user.id, cards=cards, **data)
            return redirect("web-play", adventure.pk)
    rows = Adventure.objects.filter(owner=request.user, hidden=False).order_by("-updated_at", "-id")
    page = Paginator(rows, ADVENTURES_PER_PAGE).get_page(request.GET.get("page"))
    joined = request.user.memberships.filter(adventure__hidden=False).select_related("adventure__owner", "character")
    invited = members.invitations_of(user_id=request.user.id)
    return render(
        request,
        "play/adventures.html",
        {
            "adventures": page.object_list,
            "page": page,
            "form": form,
            "joined": joined[:50],
            "invited": invited[:20],
        },
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def adventure_delete(request, adventure_id):
    writes.adventure_delete(adventure_id=access_adventure(user_id=request.user.id, adventure_id=adventure_id).pk)
    return redirect("web-adventures")


@login_required
@require_safe
def play(request, adventure_id):
    adventure = access_adventure(user_id=request.user.id, adventure_id=adventure_id, may="watch")
    if adventure.viewer != "owner":  # a member's page: the story, the turn box, who plays (play/together.js)
        return render(request, "play/together.html", {"adventure": adventure})
    return render(request, "play/play.html", {"adventure": adventure, "presets": list(sampling.PRESETS)})


@login_required
@require_safe
def join(request, code):
    """A link's invitation: the story it invites to, the character to play, a Join button."""
    return _join_page(request, members.invite_by_token(code), post_to=f"/api/join/{code}/")


@login_required
@require_safe
def invitation(request, invite_id):
    """An invitation by username, as its invitee opens it from their Stories page."""
    invite = members.invitation_for(user_id=request.user.id, invite_id=invite_id)
    return _join_page(request, invite, post_to=f"/api/invites/{invite.pk}/accept/")


def _join_page(request, invite, *, post_to: str):
    adventure = invite.adventure
    if adventure.owner_id == request.user.id or adventure.memberships.filter(user_id=request.user.id).exists():
        return redirect("web-play", adventure.pk)
    characters = members.free_characters(adventure)
    return render(request, "play/join.html", {"invite": invite, "characters": characters, "post_to": post_to})


@login_required
def settings_page(request):
    return render(request, "play/settings.html")
