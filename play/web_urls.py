from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.decorators.csrf import ensure_csrf_cookie

from play import web, web_library
from stories.accounts.auth import writes_limited

urlpatterns = [
    path("", web.home, name="web-home"),
    path("accounts/login/", web.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", web.signup, name="web-signup"),
    path("accounts/password/", web.PasswordChangeView.as_view(), name="web-password-change"),
    path(
        "accounts/password/changed/",
        auth_views.PasswordChangeDoneView.as_view(template_name="accounts/password_changed.html"),
        name="web-password-changed",
    ),
    path("accounts/password/reset/", web.PasswordResetView.as_view(), name="web-password-reset"),
    path(
        "accounts/password/reset/sent/",
        auth_views.PasswordResetDoneView.as_view(template_name="accounts/password_reset_sent.html"),
        name="web-password-reset-sent",
    ),
    path(
        "accounts/password/reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            template_name="accounts/password_reset_confirm.html", success_url="/accounts/password/reset/done/"
        ),
        name="password_reset_confirm",
    ),
    path(
        "accounts/password/reset/done/",
        auth_views.PasswordResetCompleteView.as_view(template_name="accounts/password_reset_done.html"),
        name="web-password-reset-done",
    ),
    path("play/", ensure_csrf_cookie(web.adventures), name="web-adventures"),
    path("play/<int:adventure_id>/", ensure_csrf_cookie(web.play), name="web-play"),
    path("play/<int:adventure_id>/delete/", web.adventure_delete, name="web-adventure-delete"),
    path("join/<str:code>/", ensure_csrf_cookie(web.join), name="web-join"),
    path("invitations/<int:invite_id>/", ensure_csrf_cookie(web.invitation), name="web-invitation"),
    path("settings/", ensure_csrf_cookie(web.settings_page), name="web-settings"),
    path("library/", web_library.library, name="web-library"),
    path("library/mine/", web_library.mine, name="web-scenarios-mine"),
    path("library/new/", ensure_csrf_cookie(web_library.editor), name="web-scenario-new"),
    path("library/s/<slug:scenario_key>/", web_library.scenario_page, name="web-scenario"),
    path("library/s/<slug:scenario_key>/edit/", ensure_csrf_cookie(web_library.editor), name="web-scenario-edit"),
    path("library/s/<slug:scenario_key>/play/", web_library.scenario_play, name="web-scenario-play"),
    path("library/s/<slug:scenario_key>/report/", web_library.scenario_report, name="web-scenario-report"),
    path("library/s/<slug:scenario_key>/share/", web_library.scenario_visibility, name="web-scenario-share"),
    path(
        "library/s/<slug:scenario_key>/versions/<int:number>/restore/",
        web_library.scenario_restore,
        name="web-scenario-restore",
    ),
    path("library/s/<slug:scenario_key>/link/", web_library.scenario_link, name="web-scenario-link"),
    path("library/s/<slug:scenario_key>/delete/", web_library.scenario_delete, name="web-scenario-delete"),
]
# Every page's writes count as the API's do (stories.accounts.auth.WritesThrottle).
for _pattern in urlpatterns:
    _pattern.callback = writes_limited(_pattern.callback)
